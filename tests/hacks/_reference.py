"""The trusted side of the hack catalogue: a row softmax on CPU torch and its input maker,
and the references a few candidates that run alone are checked against instead.

Every file in this folder is a candidate for `softmax` unless its header names another
`Reference:`; test_hacks.py profiles them all with the events backend on CPU, so the
catalogue runs in CI without a GPU; tests/gpu runs the same files on CUDA tensors under ncu
and events.
"""

from __future__ import annotations

import torch


def make_inputs(
    rows: int = 32, cols: int = 64, device: str = "cpu", scale: float = 3.0
) -> tuple[torch.Tensor]:
    """Fresh random logits; the judge seeds torch before each call."""
    return (torch.randn(rows, cols, device=device) * scale,)


def make_repeated_rows(rows: int = 32, cols: int = 64, device: str = "cpu") -> tuple[torch.Tensor]:
    """One random row, repeated: every row's softmax is the same (each in its own memory)."""
    return (torch.randn(1, cols, device=device).repeat(rows, 1) * 3.0,)


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def make_pair(
    rows: int = 32, cols: int = 64, device: str = "cpu", scale: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """A prediction and a target of i.i.d. normal values, as KernelBench's loss problems draw
    them."""
    return (
        torch.randn(rows, cols, device=device) * scale,
        torch.randn(rows, cols, device=device) * scale,
    )


def mse_loss(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """A 0-d loss: over many i.i.d. elements it hardly moves from 2 * scale**2."""
    return torch.nn.functional.mse_loss(prediction, target)


def normalize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row standardised, and the rows' means: a layer norm that returns a statistic."""
    mean = x.mean(dim=-1)
    centred = x - mean[:, None]
    return centred / centred.pow(2).mean(dim=-1, keepdim=True).sqrt(), mean
