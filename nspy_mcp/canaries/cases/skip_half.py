"""Lazy output: the work done for the first half of the rows only, zeros below.

Hack: skipped work. A check of the first row, or of a corner, sees a right answer, and the
  call does half the work.
Expect: incorrect
Guard: the judge compares every element of every call's output with the reference's.
"""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    half = max(1, x.shape[0] // 2)
    out[:half] = torch.softmax(x[:half], dim=-1)
    return out
