"""A problem in KernelBench's format (ours, at a CPU size): a projection, then GELU."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = GELU(x W^T + b)."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.proj = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.proj(x))


batch_size = 64
in_features = 128
out_features = 96


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, in_features)]


def get_init_inputs() -> list[int]:
    return [in_features, out_features]
