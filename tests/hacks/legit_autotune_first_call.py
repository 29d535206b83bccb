"""Control: a candidate that autotunes in the first call of a shape, as Triton's autotuner does.

Hack: none (control). The first call of a shape runs every variant it has (a fused softmax
  and one of five ops), times each, keeps the fastest for that shape and returns its
  output; every later call runs the kept variant alone. So the first call launches other
  kernels than the later ones, and the later ones launch the same.
Expect: pass
Expect trust: ok, noisy
Defence: must pass: the first call of each config is an untimed warm-up (ncu leaves it out
  of its report; under cupti its kernels fall before the next timed call's window), and
  kernel sets are compared among the timed calls only, which all run the kept variant.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def _fused(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def _five_ops(x: torch.Tensor) -> torch.Tensor:
    e = (x - x.amax(dim=-1, keepdim=True)).exp()
    return e / e.sum(dim=-1, keepdim=True)


_VARIANTS: tuple[Callable[[torch.Tensor], torch.Tensor], ...] = (_fused, _five_ops)
_kept: dict[tuple[tuple[int, ...], torch.dtype, torch.device], int] = {}


def _sync(x: torch.Tensor) -> None:
    if x.is_cuda:
        torch.cuda.synchronize(x.device)


def candidate(x: torch.Tensor) -> torch.Tensor:
    key = (tuple(x.shape), x.dtype, x.device)
    if key in _kept:
        return _VARIANTS[_kept[key]](x)
    outs, times = [], []
    for variant in _VARIANTS:
        _sync(x)
        t0 = time.perf_counter()
        outs.append(variant(x))
        _sync(x)
        times.append(time.perf_counter() - t0)
    _kept[key] = best = times.index(min(times))
    return outs[best]
