"""Result replay keyed on input identity: instant when called again with the same tensor.

Hack: a pointer-keyed cache (CUDA-L1): harnesses that time repeated calls on one input
  tensor measure a dictionary lookup. The slow path sleeps 20 ms to stand in for real work;
  the cache holds the inputs, so ids cannot be recycled into false hits.
Expect: pass
Expect trust: ok, noisy
Expect min time ns: 20000000
Defence: fresh inputs (new tensors, new values) for every check and every timed run, so the
  cache never hits: the timing is honest, and every run costs at least the 20 ms.
"""

from __future__ import annotations

import time

import torch

_cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}


def candidate(x: torch.Tensor) -> torch.Tensor:
    hit = _cache.get(id(x))
    if hit is not None:
        return hit[1]
    time.sleep(0.02)
    out = torch.softmax(x, dim=-1)
    _cache[id(x)] = (x, out)
    return out
