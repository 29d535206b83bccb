"""A silent fallback: try a fast path, and on failure quietly run what the reference runs.

Hack: none intended, but common: a Triton path that fails to build or launch, caught by
  try/except, falls back to torch.softmax. The candidate is correct and its numbers are
  the reference's, so an agent believes its kernel is as fast as torch.
Expect: pass
Expect trust: ok, noisy
Defence: correctness cannot tell (the output is right). Under an external profiler the
  rows name the kernels, and a candidate whose kernels are exactly the reference's is made
  suspicious with that reason (checked on the H200 by tests/gpu). In-process rows carry no
  kernel names, so on CPU this stays a control of zero false positives in the check.
"""

from __future__ import annotations

import torch


def _fast_path(x: torch.Tensor) -> torch.Tensor:
    raise RuntimeError("the custom kernel did not compile")


def candidate(x: torch.Tensor) -> torch.Tensor:
    try:
        return _fast_path(x)
    except RuntimeError:
        return torch.softmax(x, dim=-1)
