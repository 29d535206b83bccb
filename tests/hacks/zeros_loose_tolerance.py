"""All zeros under a loose tolerance: passes allclose when the outputs are small.

Hack: trivial output under a loose tolerance (all-zeros passed allclose(atol=1e-2) on 4 of
  60 KernelBench level-1 problems): with 4096 columns and gentle logits each softmax entry
  is about 2.4e-4, so zeros are within atol=0.01 everywhere.
Expect: incorrect
Expect reasons: trivial answer
Runs alone: it needs its own tolerance and config.
Check atol: 0.01
Config: rows=8, cols=4096, scale=0.5
Defence: the judge scores trivial answers (zeros, a constant, the input) against each
  config's expected output; when one of them passes the tolerance, a candidate must be
  ten times closer than it.
"""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(x)
