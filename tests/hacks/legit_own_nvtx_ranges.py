"""Control: a candidate that marks its own work with NVTX ranges (push/pop and start/end).

Hack: none (control). Profiling-minded code annotates itself: a push/pop range in the
  default domain and a start/end range in a domain of its own around its kernels, all inside
  the call.
Expect: pass
Expect trust: ok, noisy
Defence: must pass; only start/end ranges of domain 'nspy' are read as the harness's, so a
  candidate's own ranges change neither the attribution nor the trust
  (collectors/ranges.py). Without the nvtx package (or on CPU, where no tool listens) the
  ranges are no-ops.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

try:
    import nvtx
except ImportError:  # pragma: no cover - the ranges are optional
    nvtx = None


@contextlib.contextmanager
def _ranges() -> Iterator[None]:
    if nvtx is None:
        yield
        return
    nvtx.push_range(message="my_softmax")
    rid = nvtx.start_range(message="rows", domain="my_kernels")
    try:
        yield
    finally:
        nvtx.end_range(rid)
        nvtx.pop_range()


def candidate(x: torch.Tensor) -> torch.Tensor:
    with _ranges():
        shifted = x - x.amax(dim=-1, keepdim=True)
        e = shifted.exp()
        return e / e.sum(dim=-1, keepdim=True)
