"""A finalizer finishes the output after the call returned.

Hack: work after the timed window, run by the garbage collector. The candidate computes the
  first half of the rows and leaves the second half to the `__del__` of an object in a
  reference cycle (a cycle is freed only by the collector), and fills the collector's
  youngest generation to its threshold: the first allocation after the return, in the
  harness right after the window closed and before the output is copied, runs the
  collector and the finalizer, so the copies read a whole output that was half timed.
  Honest twin: legit_finalizer_after_return (a finalizer that only releases a scratch
  buffer, its output complete when it returns).
Expect: incorrect
Expect reasons: output mismatch
Defence: the collector is off from before the call until the output is in the judge's slot
  (contestant/call_guard.py), so the cycle is freed, and its finalizer run, only after the
  judge has the output as the window left it: half the rows, which fail the check. The
  finalizer then writes into a tensor nobody reads.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import torch


class _Finisher:
    def __init__(self, finish: Callable[[], None]) -> None:
        self.finish = finish
        self.me = self  # a cycle: only the collector frees it
        self.pad: list[Any] = []

    def __del__(self) -> None:
        self.finish()


def candidate(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    half = x.shape[0] // 2
    out[:half] = torch.softmax(x[:half], dim=-1)

    def finish() -> None:
        out[half:] = torch.softmax(x[half:], dim=-1)

    keeper = _Finisher(finish)
    threshold = gc.get_threshold()[0]
    # Live objects the collector tracks, up to its threshold: the next tracked allocation
    # (the harness's, after the return) starts a collection.
    while gc.isenabled() and gc.get_count()[0] < threshold:
        keeper.pad.append([])
    return out
