"""Softmax in numpy: the kernels `nspy-mcp demo` profiles (and the examples and tests use).

Only numpy, so the demo runs in a fresh environment with nothing but our dependencies, on
any machine. The server never imports this file: it names the functions by path
(``demo_kernels.py:softmax_reference`` with this directory as ``workdir``), and only the
profiling worker runs them.

- `softmax_reference`: the trusted baseline, one row at a time (simple and obviously right).
- `softmax_vectorized`: a correct candidate, all rows at once (faster).
- `softmax_wrong_axis`: a deliberately wrong candidate (normalizes columns instead of rows),
  so the demo shows an `incorrect` verdict and that such a candidate is never timed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

DIRECTORY = Path(__file__).resolve().parent
"""Pass this as the request's `workdir`; the specs below are relative to it."""

FILE = Path(__file__).name
REFERENCE = f"{FILE}:softmax_reference"
VECTORIZED = f"{FILE}:softmax_vectorized"
WRONG_AXIS = f"{FILE}:softmax_wrong_axis"
INPUTS = f"{FILE}:make_inputs"


def make_inputs(rows: int, cols: int) -> tuple[Any, ...]:
    """One float32 matrix; the worker seeds numpy's global RNG before each call."""
    return (np.random.standard_normal((rows, cols)).astype(np.float32),)


def softmax_reference(x: Any) -> Any:
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        row = x[i] - x[i].max()
        e = np.exp(row)
        out[i] = e / e.sum()
    return out


def softmax_vectorized(x: Any) -> Any:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def softmax_wrong_axis(x: Any) -> Any:
    e = np.exp(x - x.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)


# -- GPU variants: used by the demo only where torch sees a CUDA device -----------------------
# torch is imported inside the functions, so this file still imports with numpy alone.

TORCH_REFERENCE = f"{FILE}:softmax_torch_composed"
TORCH_FUSED = f"{FILE}:softmax_torch_fused"
TORCH_WRONG_AXIS = f"{FILE}:softmax_torch_wrong_axis"
TORCH_INPUTS = f"{FILE}:make_inputs_torch"


def make_inputs_torch(rows: int, cols: int) -> tuple[Any, ...]:
    import torch

    return (torch.randn(rows, cols, device="cuda"),)


def softmax_torch_composed(x: Any) -> Any:
    """The reference: softmax spelled out (several kernels: max, sub+exp, sum, div)."""
    e = (x - x.amax(dim=1, keepdim=True)).exp()
    return e / e.sum(dim=1, keepdim=True)


def softmax_torch_fused(x: Any) -> Any:
    import torch

    return torch.softmax(x, dim=1)


def softmax_torch_wrong_axis(x: Any) -> Any:
    import torch

    return torch.softmax(x, dim=0)
