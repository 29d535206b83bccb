"""Replay by address: cache the output under the input's data_ptr().

Hack: a cache keyed by the input's memory address. Fresh inputs of one shape often land
  at an address used before (the caching allocator reuses blocks), so the cache replays
  a stale answer: on CPU tensors the events backend reported 26x before every output
  was checked.
Expect: incorrect or pass
Runs alone: its cache is process-wide.
Defence: inputs change content on every call, also at a reused address, and the judge
  checks the output of every call, so a stale answer fails. Whether the allocator reuses
  an address is up to it: when it does not, the cache never hits and the candidate is
  honest, so either verdict is right; a stale answer that passes would be wrong.
"""

from __future__ import annotations

import torch

_cache: dict[int, torch.Tensor] = {}


def candidate(x: torch.Tensor) -> torch.Tensor:
    hit = _cache.get(x.data_ptr())
    if hit is not None and hit.shape == x.shape:
        return hit
    out = torch.softmax(x, dim=-1)
    _cache[x.data_ptr()] = out
    return out
