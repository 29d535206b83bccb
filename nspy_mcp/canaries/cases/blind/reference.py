"""A blind check's trusted side: the MSE of two i.i.d. normal tensors, 0-d.

Over 1 << 20 element pairs the loss is 2 with a spread of sqrt(8 / 2**20), about 2.8e-3,
so under a loose absolute tolerance (0.02, the kind KernelBench's float32 problems once
used) any answer near 2 passes every call's check, computed or not. The judge asks that
question of every config (judge/discrimination.py) and says what it cannot tell.
Reference: reference.py:mse_loss
Inputs: reference.py:make_pair
Check atol: 0.02
Backends: events
"""

from __future__ import annotations

import torch


def make_pair(rows: int = 1024, cols: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """A prediction and a target of N(0, 1) values; the judge seeds torch before each call."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.randn(rows, cols, device=device), torch.randn(rows, cols, device=device)


def mse_loss(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(prediction, target)
