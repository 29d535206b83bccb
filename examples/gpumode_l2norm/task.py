"""Types of the task (ours, in GPU MODE's task format): L2-normalise every row."""

from typing import TypedDict

import torch

input_t = torch.Tensor
output_t = torch.Tensor


class TestSpec(TypedDict):
    rows: int
    cols: int
    seed: int
