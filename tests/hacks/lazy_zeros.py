"""Lazy output: no work at all, zeros of the right shape and dtype.

Hack: wrong output that is cheap (a placeholder, or work skipped): the fastest candidate
  there is, if nobody looks at the values.
Expect: incorrect
Expect reasons: output mismatch
Defence: correctness is checked before any timing, on fresh seeded inputs; a candidate that
  fails is not timed.
"""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(x)
