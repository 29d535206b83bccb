"""An attribute on the timer object: the harness's own timer reports a tenth of the time.

Hack: in-process timers below the watch. The watch saw the timer classes' methods, not the
  timer object: a candidate that finds the harness on its call stack sets `time_call` on
  the timer instance, which shadows the class's method for that object only, and divides
  every time it reports by ten.
Expect: pass
Expect trust: suspicious
Runs alone: the patched timer times every annotation called after it.
Defence: the integrity watch records the harness object's state and that of every object
  of ours it holds (timer, device), before any candidate is imported: the attribute is
  named ('nsight_core.collectors.timers.ClockTimer().time_call (set on the instance)'),
  and every timer's rows are suspicious, since it is each timer's own object.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

_done = False


def _shorten(timer: Any) -> None:
    real = type(timer).time_call

    def short(device: Any, key: Any, fn: Any) -> Any:
        timed = real(timer, device, key, fn)
        if timed.ns is not None:
            timed.ns /= 10
        return timed

    timer.time_call = short


def _patch_timer() -> None:
    frame: Any = sys._getframe(1)
    while frame is not None:
        timer = getattr(frame.f_locals.get("self"), "timer", None)
        if timer is not None and hasattr(timer, "time_call"):
            _shorten(timer)
            return
        frame = frame.f_back


def candidate(x: torch.Tensor) -> torch.Tensor:
    global _done
    if not _done:
        _done = True
        _patch_timer()
    return torch.softmax(x, dim=-1)
