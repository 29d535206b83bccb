"""Output type: the right values inside a tensor subclass that stands for deferred work.

Hack: a lazy result object. A subclass can run its real work when a checker reads it,
  after the timer stopped; here the values are already right, so only the type tells.
Expect: incorrect
Expect reasons: Pending
Guard: the judge requires the exact type of the reference's output.
"""

from __future__ import annotations

import torch


class Pending(torch.Tensor):
    """Looks like a tensor to `isinstance`; a lazy implementation would compute on access."""


def candidate(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1).as_subclass(Pending)
