"""A candidate in KernelBench's format: only ModelNew, built from the problem's init inputs.

GELU written out with erf, fused with the bias add into one expression.
"""

import math

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.proj = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.addmm(self.proj.bias, x, self.proj.weight.t())
        return 0.5 * y * (1.0 + torch.erf(y / math.sqrt(2.0)))
