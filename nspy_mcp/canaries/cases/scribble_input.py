"""Input mutation: a right answer, and the input negated on the way out.

Hack: writing into an input. A harness that runs the reference after the candidate on the
  same tensor compares against the softmax of the scribbled input, and a later call that
  reuses the buffer computes from garbage.
Expect: incorrect
Expect reasons: mutated
Guard: the judge compares every input slot after the call with its own copy.
"""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor) -> torch.Tensor:
    out = torch.softmax(x, dim=-1)
    x.neg_()
    return out
