"""Softmax in numpy: the candidates `nspy-mcp demo` profiles (and the examples and tests use).

Only numpy, so the demo runs in a fresh environment with nothing but our dependencies, on
any machine. The server never imports this file: it names the functions by path
(``demo_kernels.py:softmax_vectorized`` with this directory as ``workdir``), and only the
job's processes run them. The reference and the input makers live in demo_reference.py:
a candidate never shares the trusted module (docs/correctness.md).

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
TRUSTED = "demo_reference.py"
REFERENCE = f"{TRUSTED}:softmax_reference"
VECTORIZED = f"{FILE}:softmax_vectorized"
WRONG_AXIS = f"{FILE}:softmax_wrong_axis"
INPUTS = f"{TRUSTED}:make_inputs"


def softmax_vectorized(x: Any) -> Any:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def softmax_wrong_axis(x: Any) -> Any:
    e = np.exp(x - x.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)


# -- GPU variants: used by the demo only where torch sees a CUDA device -----------------------
# torch is imported inside the functions, so this file still imports with numpy alone.

TORCH_REFERENCE = f"{TRUSTED}:softmax_torch_composed"
TORCH_FUSED = f"{FILE}:softmax_torch_fused"
TORCH_WRONG_AXIS = f"{FILE}:softmax_torch_wrong_axis"
TORCH_INPUTS = f"{TRUSTED}:make_inputs_torch"


def softmax_torch_fused(x: Any) -> Any:
    import torch

    return torch.softmax(x, dim=1)


def softmax_torch_wrong_axis(x: Any) -> Any:
    import torch

    return torch.softmax(x, dim=0)
