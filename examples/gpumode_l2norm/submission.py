"""A submission: one reciprocal square root per row instead of a norm and a division."""

import torch
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    squares = (data * data).sum(dim=1, keepdim=True)
    return data * torch.rsqrt(squares.clamp_min(1e-24))
