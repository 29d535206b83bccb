"""The trusted side of `nspy-mcp demo`: the reference softmax and the input makers.

Apart from the candidates (demo_kernels.py) on purpose: the judge imports this module, and
a module that held a candidate too would run that candidate's module-level code where the
verdicts are made, so such a request is refused (docs/correctness.md). Only numpy at import;
torch is imported inside the GPU variants.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def make_inputs(rows: int, cols: int) -> tuple[Any, ...]:
    """One float32 matrix; the judge seeds numpy's global RNG before each call."""
    return (np.random.standard_normal((rows, cols)).astype(np.float32),)


def softmax_reference(x: Any) -> Any:
    """One row at a time: simple and obviously right."""
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        row = x[i] - x[i].max()
        e = np.exp(row)
        out[i] = e / e.sum()
    return out


def make_inputs_torch(rows: int, cols: int) -> tuple[Any, ...]:
    import torch

    return (torch.randn(rows, cols, device="cuda"),)


def softmax_torch_composed(x: Any) -> Any:
    """The GPU reference: softmax spelled out (several kernels: max, sub+exp, sum, div)."""
    e = (x - x.amax(dim=1, keepdim=True)).exp()
    return e / e.sum(dim=1, keepdim=True)
