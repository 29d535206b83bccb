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

import contextlib
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, get_args

from nsight_core.annotation import RegionTiming, end_range, start_range
from nsight_core.collectors.base import Backend, ChildTimer, TamperScope
from nsight_core.collectors.events import Device, Settle, output_changed, start_timer, sync_all
from nsight_core.protocol import KernelTiming, RunKey, untimed_range_name

TIMER_KINDS: tuple[str, ...] = get_args(ChildTimer)
"""Every timer kind a contestant accepts on its command line."""


HARNESS_PATHS = (
    "nsight_core",
    "time",
    "torch.cuda.Event",
    "cupy.cuda",
    "cupti",
    "nvtx",
    "socket",
    "gc",
)
"""What only the contestant's harness and its timers use (dotted prefixes of the names the
integrity watch reports): rebinding one of these can change what a timer reports, never
what a candidate computes. A timer whose path does not go through it is untouched."""

REPLY_PATH = (
    "nsight_core.contestant",
    "nsight_core.runtime",
    "nsight_core.protocol",
    "socket",
    "gc",
)
"""The harness between an in-process timer and the judge: the loop that calls candidates,
the slots and the reply that carries the number (and the collector that could pause it)."""


def on_path(what: str, prefixes: tuple[str, ...]) -> bool:
    """Whether the watched name ``what`` ('nsight_core.collectors.events.Device().kind',
    'time.perf_counter_ns (seen after ...)') lies under one of the dotted ``prefixes``."""
    return any(what == p or (what.startswith(p) and what[len(p)] in ".([ ") for p in prefixes)


@dataclass
class TimedCall:
    """What the contestant learned of one timed call besides its output."""

    out: Any
    ns: float | None = None
    """The call's time by an in-process clock; None where an external profiler measures."""
    kernels: list[KernelTiming] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)
    """Kernels another thread launched since the previous timed call (cupti)."""
    after_parts: dict[str, float] | None = None
    """Work seen after the window beyond an honest call's, ns, by where it ran
    (`window_guard.AFTER_PARTS`; None: not measured)."""
    latency_ns: float | None = None
    """The call's host-inclusive latency, ns, where the timer's own number excludes it."""
    snapshot: Any = None
    """An in-process timer's copy of the output as the window left it (`changed_after`)."""

    @property
    def after_ns(self) -> float | None:
        """All the work seen after the window, ns (None: not measured)."""
        return None if self.after_parts is None else sum(self.after_parts.values())

    def changed_after(self) -> list[str]:
        """The finding when the output changed after its window closed (call it once the
        output is in the judge's slot: a thread or stream still writing has had that long)."""
        return output_changed(self.snapshot, self.out)


class CallTimer(ABC):
    """Measures the contestant's timed calls; made and started before any job code runs, so
    the methods it binds are the harness's own, not what a candidate patches later."""

    kind: ClassVar[ChildTimer]
    external: ClassVar[bool]
    """True when a profiler outside the process measures (ncu reads NVTX ranges): the
    process then runs no GPU warm-up of its own that the profiler would record."""
    relies_on: ClassVar[tuple[str, ...]] = HARNESS_PATHS
    """Dotted prefixes of everything this timer's numbers go through in the contestant
    (functions, classes, their instances' state, buffers): a rebinding there is tampering
    with this timer; one elsewhere among `HARNESS_PATHS` leaves its numbers standing. A
    timer that names nothing narrower relies on all of the harness."""

    @classmethod
    def tampering_affects(cls, what: str) -> TamperScope:
        """What the rebinding the watch named ``what`` puts in doubt: this timer's numbers,
        nothing of this timer's (another timer's path), or every row (anything else: a
        framework function that candidates and the reference compute with)."""
        if on_path(what, cls.relies_on):
            return "timer"
        return "none" if on_path(what, HARNESS_PATHS) else "all"

    def start(self) -> None:
        """Load what timing needs: before confinement and before any candidate import."""
        return None

    def notes(self) -> list[str]:
        """Remarks on how timing ran, for the job's provenance."""
        return []

    @abstractmethod
    def time_call(
        self, device: Device, key: RunKey, fn: Callable[[], Any], settle: Settle | None = None
    ) -> TimedCall:
        """Run ``fn`` once as the timed call ``key``. A timer that reads the output before
        returning it (a snapshot) hands it to ``settle`` first, right after its end read."""

    def timed_call(
        self,
        device: Device,
        key: RunKey,
        nonce: str,
        fn: Callable[[], Any],
        prelude: Callable[[], None] | None = None,
        settle: Settle | None = None,
    ) -> TimedCall:
        """Run ``fn`` once as the timed call ``key``, which the judge sent with ``nonce``.
        ``prelude`` (the inputs' unmasking) runs first; a timer that holds the device's
        stream runs it behind the hold, so the inputs are readable only once the window
        opens. ``settle``: as in `time_call`."""
        if prelude is not None:
            prelude()
        return self._timed_named(device, key, nonce, fn, settle)

    def _timed_named(
        self,
        device: Device,
        key: RunKey,
        nonce: str,
        fn: Callable[[], Any],
        settle: Settle | None = None,
    ) -> TimedCall:
        """The timed call, its inputs readable: only a timer whose ranges a profiler reads
        names the call by ``nonce``."""
        return self.time_call(device, key, fn, settle)

    def untimed_call(
        self, annotation: str, config_id: int, nonce: str, fn: Callable[[], Any]
    ) -> Any:
        """Run ``fn`` once, untimed (warm-up, a checked call, a probe), its work finished."""
        out = fn()
        sync_all()
        return out

    @contextlib.contextmanager
    def harness(
        self, annotation: str, config_id: int | None, run: int | None, nonce: str | None
    ) -> Iterator[None]:
        """The harness's own work of a call (its inputs in; its checks and its output out)
        or of an import (``config_id`` None): only a profiler that reads ranges cares."""
        yield

    def region(self) -> Callable[[], RegionTiming]:
        """Start timing an annotated region of the `@kernel` mode, where the user's own
        function opens and closes it; the stopper returns (ns, the region's kernels). By
        default the clock of `events.start_timer`, which sees no kernels."""
        stop = start_timer()
        return lambda: (stop(), [])


class RangeTimer(CallTimer):
    """One NVTX range per timed call, named for its run: an external profiler measures it."""

    kind = "range"
    external = True
    relies_on = (
        "nvtx",
        "nsight_core.annotation",
        "nsight_core.collectors.timers.CallTimer",
        "nsight_core.collectors.timers.RangeTimer",
        "nsight_core.collectors.timers.start_range",
        "nsight_core.collectors.timers.end_range",
        "nsight_core.collectors.timers.sync_all",
        "nsight_core.collectors.timers.untimed_range_name",
        "nsight_core.protocol.RunKey",
        "nsight_core.protocol.untimed_range_name",
        "nsight_core.contestant",
    )
    """The ranges ncu reads and the loop that opens them; a forged reply or a patched
    clock changes no number that comes from outside the process."""

    def start(self) -> None:
        import nvtx  # noqa: F401  (loaded now, so no profiled call pays for the import)

    def time_call(
        self, device: Device, key: RunKey, fn: Callable[[], Any], settle: Settle | None = None
    ) -> TimedCall:
        # The output is not read here: the caller settles it once the range has ended.
        return self._in_range(key.range_name(), fn)

    def _timed_named(
        self,
        device: Device,
        key: RunKey,
        nonce: str,
        fn: Callable[[], Any],
        settle: Settle | None = None,
    ) -> TimedCall:
        # The nonce is the judge's for this call: a range of this name that the judge did
        # not issue, or out of the order it issued them, is forged (collectors/ranges.py).
        return self._in_range(key.range_name(nonce), fn)

    def untimed_call(
        self, annotation: str, config_id: int, nonce: str, fn: Callable[[], Any]
    ) -> Any:
        # ncu leaves out what runs in an untimed range (protocol.NCU_NVTX_EXCLUDE) and
        # profiles everything else, so work outside the timed ranges is in its report.
        return self._in_range(untimed_range_name(annotation, config_id, nonce), fn).out

    @contextlib.contextmanager
    def harness(
        self, annotation: str, config_id: int | None, run: int | None, nonce: str | None
    ) -> Iterator[None]:
        # A timed call's own harness work is profiled (its kernels count for no run, and a
        # candidate's work done meanwhile is seen); an untimed call's or an import's is not.
        if run is None or config_id is None or nonce is None:
            name = untimed_range_name(annotation, config_id, nonce)
        else:
            name = RunKey(annotation, config_id, run).harness_range_name(nonce)
        rid = start_range(name)
        try:
            yield
        finally:
            end_range(rid)

    def _in_range(self, name: str, fn: Callable[[], Any]) -> TimedCall:
        rid = start_range(name)
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
    relies_on = (
        *REPLY_PATH,
        "time",
        "torch.cuda.Event",
        "cupy.cuda",
        "nsight_core.collectors.events",
        "nsight_core.collectors.window_guard",
        "nsight_core.collectors.l2_persist",
        "nsight_core.collectors.timers.CallTimer",
        "nsight_core.collectors.timers.ClockTimer",
        "nsight_core.collectors.timers.TimedCall",
    )
    """Host clock or CUDA events around the call, after the L2 flush (events.Device)."""

    def __init__(self) -> None:
        self._time_call = Device.time_checked  # bound before any candidate can rebind it

    def time_call(
        self, device: Device, key: RunKey, fn: Callable[[], Any], settle: Settle | None = None
    ) -> TimedCall:
        """The window, and what ran after it (`window_guard.WindowGuard`, collectors/late.py)."""
        return self._timed(device, fn, None, key.annotation, settle)

    def timed_call(
        self,
        device: Device,
        key: RunKey,
        nonce: str,
        fn: Callable[[], Any],
        prelude: Callable[[], None] | None = None,
        settle: Settle | None = None,
    ) -> TimedCall:
        # The unmasking runs behind the stream hold (`Device.time_checked`), not before it.
        return self._timed(device, fn, prelude, key.annotation, settle)

    def _timed(
        self,
        device: Device,
        fn: Callable[[], Any],
        prelude: Callable[[], None] | None,
        who: str,
        settle: Settle | None = None,
    ) -> TimedCall:
        # Each annotation's stream hold follows its own launches (`events.StreamHold`).
        got = self._time_call(device, fn, prelude, who, settle)
        return TimedCall(
            got.out,
            got.ns,
            after_parts=got.after_parts,
            latency_ns=got.latency_ns,
            snapshot=got.snapshot,
        )


_TIMERS: dict[str, tuple[str, str]] = {
    "range": (__name__, "RangeTimer"),
    "clock": (__name__, "ClockTimer"),
    "cupti": ("nsight_core.collectors.cupti", "CuptiCallTimer"),
}


def tampering_affects(backend: Backend, what: str) -> TamperScope:
    """What a rebinding the contestant's integrity watch named (``what``) puts in doubt for
    ``backend``: its timer knows what its numbers go through, so a patched clock that this
    backend never reads leaves its rows standing."""
    return timer_class(backend.child_timer).tampering_affects(what)


def timer_class(kind: str) -> type[CallTimer]:
    """The `CallTimer` class of ``kind``; its module is imported only now."""
    module, name = _TIMERS[kind]
    cls: type[CallTimer] = getattr(importlib.import_module(module), name)
    return cls


def call_timer(kind: str) -> CallTimer:
    """A new timer of ``kind``; its module is imported only now (cupti's loads libcupti)."""
    return timer_class(kind)()
