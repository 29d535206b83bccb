"""The contestant's side of a backend: how one timed call is measured in its process.

Each backend names a child-side timer kind (`Backend.child_timer`); the contestant gets the
kind on its command line, makes the matching `CallTimer` before any job code exists
(`call_timer`), starts it before it confines itself, and then measures every timed call
through it. The judge's side of the same measurement is `Backend.call_samples`. So no module
outside `collectors/` compares timer or backend names.

This module is imported by every contestant: it stays light, and the cupti timer's module
is imported only by contestants that run it.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, get_args

from nsight_core.annotation import end_range, start_range
from nsight_core.collectors.base import ChildTimer
from nsight_core.collectors.events import Device, sync_all
from nsight_core.protocol import KernelTiming, RunKey

TIMER_KINDS: tuple[str, ...] = get_args(ChildTimer)
"""Every timer kind a contestant accepts on its command line."""


@dataclass
class TimedCall:
    """What the contestant learned of one timed call besides its output."""

    out: Any
    ns: float | None = None
    """The call's time by an in-process clock; None where an external profiler measures."""
    kernels: list[KernelTiming] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)
    """Kernels another thread launched since the previous timed call (cupti)."""


class CallTimer(ABC):
    """Measures the contestant's timed calls; made and started before any job code runs, so
    the methods it binds are the harness's own, not what a candidate patches later."""

    kind: ClassVar[ChildTimer]
    external: ClassVar[bool]
    """True when a profiler outside the process measures (ncu reads NVTX ranges): the
    process then ends through C's exit, where the profiler finishes its report, and runs no
    GPU warm-up of its own that the profiler would record."""

    def start(self) -> None:
        """Load what timing needs: before confinement and before any candidate import."""
        return None

    def notes(self) -> list[str]:
        """Remarks on how timing ran, for the job's provenance."""
        return []

    @abstractmethod
    def time_call(self, device: Device, key: RunKey, fn: Callable[[], Any]) -> TimedCall:
        """Run ``fn`` once as the timed call ``key``."""


class RangeTimer(CallTimer):
    """One NVTX range per timed call, named for its run: an external profiler measures it."""

    kind = "range"
    external = True

    def start(self) -> None:
        import nvtx  # noqa: F401  (loaded now, so no profiled call pays for the import)

    def time_call(self, device: Device, key: RunKey, fn: Callable[[], Any]) -> TimedCall:
        rid = start_range(key.range_name())
        try:
            out = fn()
            sync_all()
        finally:
            end_range(rid)
        return TimedCall(out)


class ClockTimer(CallTimer):
    """CUDA events around the call (a host clock on CPU): the events backend."""

    kind = "clock"
    external = False

    def __init__(self) -> None:
        self._time_call = Device.time_call  # bound before any candidate can rebind it

    def time_call(self, device: Device, key: RunKey, fn: Callable[[], Any]) -> TimedCall:
        out, ns = self._time_call(device, fn)
        return TimedCall(out, ns)


_TIMERS: dict[str, tuple[str, str]] = {
    "range": (__name__, "RangeTimer"),
    "clock": (__name__, "ClockTimer"),
    "cupti": ("nsight_core.collectors.cupti", "CuptiCallTimer"),
}


def call_timer(kind: str) -> CallTimer:
    """A new timer of ``kind``; its module is imported only now (cupti's loads libcupti)."""
    module, name = _TIMERS[kind]
    timer: CallTimer = getattr(importlib.import_module(module), name)()
    return timer
