"""The trusted side of the GPU softmax examples: torch's softmax and the input maker.

Apart from the candidates (gpu_softmax.py) on purpose: the judge imports this module and
never a module that holds a candidate (docs/correctness.md). A candidate may import it.
"""

from __future__ import annotations

from typing import Any

import torch


def make_inputs(rows: int, cols: int) -> tuple[Any, ...]:
    return (torch.randn(rows, cols, device="cuda", dtype=torch.float32),)


def torch_softmax(x: Any) -> Any:
    return torch.softmax(x, dim=-1)
