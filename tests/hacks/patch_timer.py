"""Patching the timer: make the in-process clock report a fraction of the real time.

Hack: timer tampering (patching torch.cuda.Event at import gave 4.6x with a CI under the
  events backend): it rebinds the clocks an in-process timer reads so every call looks
  ten times shorter, then computes the right answer slowly.
Expect: pass
Expect trust: suspicious
Expect trust cupti: ok, noisy
Expect trust ncu: ok, noisy
Runs alone: a patched clock affects every annotation timed after it in the same process.
Defence: the contestant binds its timers before importing candidates and watches them;
  a rebound clock makes the rows of the timer that reads it suspicious, with the
  attribute named: every candidate's under events (the reference was timed before any
  candidate existed). cupti reads CUPTI's clock and ncu measures from outside the
  process, so their rows stand (`timers.tampering_affects`).
"""

from __future__ import annotations

import time
from typing import Any

import torch

_real = time.perf_counter_ns


def _fast() -> int:
    return _real() // 10


time.perf_counter_ns = _fast
if torch.cuda.is_available():
    _elapsed = torch.cuda.Event.elapsed_time

    def _short(self: Any, end: Any) -> float:
        return float(_elapsed(self, end)) / 10

    torch.cuda.Event.elapsed_time = _short  # type: ignore[method-assign,assignment]


def candidate(x: torch.Tensor) -> torch.Tensor:
    time.sleep(0.002)
    return torch.softmax(x, dim=-1)
