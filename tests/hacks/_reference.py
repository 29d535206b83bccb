"""The trusted side of the hack catalogue: a row softmax on CPU torch and its input maker.

Every file in this folder is a candidate for `softmax`; test_hacks.py profiles them all
against it with the events backend on CPU, so the catalogue runs in CI without a GPU;
tests/gpu runs the same files on CUDA tensors under ncu and events.
"""

from __future__ import annotations

import torch


def make_inputs(
    rows: int = 32, cols: int = 64, device: str = "cpu", scale: float = 3.0
) -> tuple[torch.Tensor]:
    """Fresh random logits; the judge seeds torch before each call."""
    return (torch.randn(rows, cols, device=device) * scale,)


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)
