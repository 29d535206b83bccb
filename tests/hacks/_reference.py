"""The trusted side of the hack catalogue: a row softmax on CPU torch and its input maker.

Every file in this folder is a candidate for `softmax`; test_hacks.py profiles them all
against it with the events backend, so the catalogue runs in CI without a GPU.
"""

from __future__ import annotations

import torch


def make_inputs(rows: int = 32, cols: int = 64) -> tuple[torch.Tensor]:
    """Fresh random logits; the worker seeds torch before each call."""
    return (torch.randn(rows, cols) * 3,)


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)
