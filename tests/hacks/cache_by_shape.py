"""Result replay keyed on metadata: compute once per shape, replay for every later call.

Hack: result replay / caching (tensara PR #238, kernelbot PR #501): a harness that checks
  one input and times calls on the same shape sees a correct answer and ~0 time.
Expect: incorrect
Expect reasons: output mismatch
Defence: several seeds per config: the second seed's inputs differ, the replayed answer does not.
"""

from __future__ import annotations

import torch

_cache: dict[tuple[tuple[int, ...], torch.dtype], torch.Tensor] = {}


def candidate(x: torch.Tensor) -> torch.Tensor:
    key = (tuple(x.shape), x.dtype)
    if key not in _cache:
        _cache[key] = torch.softmax(x, dim=-1)
    return _cache[key].clone()
