"""Counting calls: correct for as many calls as a check phase makes, then 1/16 of the work.

Hack: telling the check phase from the timed runs by counting calls (seeds x 2 + warm-up
  in a harness that checks first and times after): measured 11.8x, Trust ok, under ncu
  before the judge checked timed calls.
Expect: incorrect
Expect reasons: output mismatch
Runs alone: its call counter must start at zero.
Defence: there is no check phase to count: the judge compares the output of every call,
  timed ones included, and a candidate that fails any of them is not reported as timed.
"""

from __future__ import annotations

import torch

_calls = 0
HONEST_CALLS = 3


def candidate(x: torch.Tensor) -> torch.Tensor:
    global _calls
    _calls += 1
    if _calls <= HONEST_CALLS:
        return torch.softmax(x, dim=-1)
    out = torch.zeros_like(x)
    rows = max(1, x.shape[0] // 16)
    out[:rows] = torch.softmax(x[:rows], dim=-1)
    return out
