"""Lazy output as a tensor subclass: correct values, but not a plain tensor.

Hack: a tensor subclass or placeholder standing in for the result (reference-kernels
  #161/#162), which may compute inside the checker rather than in the timed call. Here the
  values are right; the type alone must fail it.
Expect: incorrect
Expect reasons: output mismatch
Defence: check.compare_outputs requires the exact type of the reference's output leaf.
"""

from __future__ import annotations

import torch


class Deferred(torch.Tensor):
    """Stands in for a lazily evaluated result."""


def candidate(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1).as_subclass(Deferred)
