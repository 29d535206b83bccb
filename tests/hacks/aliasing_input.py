"""Aliasing: softmax computed in place and the input itself returned.

Hack: output aliasing an input. It looks like a saved allocation, but the caller's input is
  gone, and a harness that compares after the fact may read the same memory twice.
Expect: incorrect
Expect reasons: aliases input
Defence: check.aliased compares the memory range of each output's storage with every
  input's; the mutation check fires too.
"""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor) -> torch.Tensor:
    x.sub_(x.max(dim=-1, keepdim=True).values).exp_()
    return x.div_(x.sum(dim=-1, keepdim=True))
