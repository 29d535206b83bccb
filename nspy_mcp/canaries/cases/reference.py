"""The canaries' trusted side: a row softmax and its input maker.

Kept apart from the candidates, as every request's trusted code must be: the judge imports
this file and never a candidate's. The inputs are small, so a job costs its processes'
start and little more; they live on the GPU when torch sees one, so cupti and ncu have
kernels to measure.
Reference: reference.py:softmax
Inputs: reference.py:make_inputs
"""

from __future__ import annotations

import torch


def make_inputs(rows: int = 16, cols: int = 64) -> tuple[torch.Tensor]:
    """Fresh logits with a wide spread; the judge seeds torch before each call."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return (torch.randn(rows, cols, device=device) * 4.0,)


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)
