"""Work that differs between calls: another launch on every other call, as many kernels.

Hack: a fast path taken on some calls only. Every other call finishes with a pass over half
  of the output instead of all of it (a multiply by one: the output is the same, bit for
  bit), so each call launches as many kernels as the others, but not the same launches.
  The count check sees nothing; a candidate that skips work on the calls it can tell apart
  (by a count of calls, the timer on its stack, the data) looks like this.
Expect: pass
Expect trust: ok, noisy
Expect trust ncu: suspicious
Expect trust cupti: suspicious
Defence: each timed call's kernel set (names, grids and blocks) is compared across the
  row's runs (collectors/kernel_sets.py): a run that launched another grid makes the rows
  suspicious. events sees no kernels, and its rows stand.
"""

from __future__ import annotations

import torch

_calls = 0


def candidate(x: torch.Tensor) -> torch.Tensor:
    global _calls
    _calls += 1
    out = torch.softmax(x, dim=-1)
    part = out if _calls % 2 else out[: max(1, out.shape[0] // 2)]
    part.mul_(1.0)
    return out
