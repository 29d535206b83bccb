"""The `cupti` backend: kernel durations from CUPTI activity records, read inside the contestant.

Child side (`CuptiTimer`, in the contestant only; ``cupti`` is imported there, never by the
server): kernel activity, and runtime/driver API activity of the launch functions only
(`record_launches_only`), is enabled once; each timed call runs as

    sync; flush L2; sync; t0 = cupti.get_timestamp(); fn(); sync; t1 = cupti.get_timestamp()
    activity_flush_all(FLUSH_FORCED)

and the call's kernels are those whose *launching API call* started in [t0, t1], matched by
correlation id, on any stream and thread: the analogue of ncu keeping the kernels launched
inside an NVTX range. The L2 flush is launched and finished before t0, so it never counts.
The one flush also brings what ran since the previous call; kernels another thread launched
then are reported (`launched_elsewhere`).
A kernel whose launch record is missing is kept when its device start falls in [t0, t1].
Memory copies and memsets are not kernels (ncu does not profile them either) and are not in
the time; those whose device start falls in [t0, t1] are reported by kind and bytes, for the
call's kernel set (collectors/kernel_sets.py), as each kernel's grid and block are.

Parent side (`CuptiBackend`, registered here): the judge turns each reply into samples
(`call_samples`) and `read_records` attributes them to the run; the backend, both of these
and the host-bound note on rows live in `collectors.cupti_samples`, which never runs in the
contestant. Everything the contestant runs stays in this module and in
`collectors.cupti_records` (the records it keeps and the split by launch, pure and tested on
CPU), both of which its integrity watch covers.

API used (cupti-python 13.0, module ``cupti.cupti``, checked against its ``cupti.pyi``):
``activity_register_callbacks(requested, completed)`` where ``requested()`` returns
``(buffer_size, max_num_records)`` and ``completed(activities)`` receives record objects
(NVIDIA's cupti-python samples, cupti_common.py; flashinfer's bench_gpu_time_with_cupti);
``activity_enable(ActivityKind.X)``; ``activity_flush_all(flag)`` (1 = forced, as NVIDIA's
samples flush); ``get_timestamp()`` on the same clock as the records (CUPTI docs:
cuptiGetTimestamp). Kernel records (``ActivityKernel10``) carry ``name``, ``start``, ``end``,
``stream_id``, ``correlation_id``, ``graph_id``, ``grid_x``..``grid_z`` and ``block_x``..
``block_z``; copy records (``ActivityMemcpy6``) ``copy_kind`` and ``bytes``, memset records
``bytes``, both ``start``, ``end``, ``correlation_id`` (as NVIDIA's samples print them); API
records (``ActivityAPI``) carry ``start``, ``end``, ``correlation_id``. Fields are copied
out inside the callback, as every example does, since a record wraps a pointer into
CUPTI's buffer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from nsight_core.annotation import RegionTiming
from nsight_core.collectors.base import register
from nsight_core.collectors.cupti_records import (
    ApiActivity,
    CopyActivity,
    KernelActivity,
    KernelSpan,
    call_spans,
    copy_kind,
    harness_thread,
    incomplete,
    launched_elsewhere,
    split_by_launch,
)
from nsight_core.collectors.cupti_samples import CuptiBackend
from nsight_core.collectors.events import Device, Settle, sync_all
from nsight_core.collectors.kernel_names import kernel_name
from nsight_core.collectors.timers import REPLY_PATH, CallTimer, TimedCall
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.protocol import KernelTiming, RunKey
from nsight_core.runtime.check import snapshot_inputs

BUFFER_BYTES = 4 << 20
"""Per activity buffer. A call makes a few hundred records of ~200 B; a full buffer is
handed over and another requested, so this only sets how often that happens."""
KERNEL_ACTIVITY = "KERNEL"
"""CUPTI's kernel record kind: ``KERNEL`` runs the process's kernels one at a time, as ncu
does, and times each one as ncu times it; ``CONCURRENT_KERNEL`` lets them overlap and
reads clearly below ncu's gpu__time_duration, where ``KERNEL`` matches it within a few
percent (docs/backends.md has the measurements)."""
FLUSH_FORCED = 1
"""CUPTI_ACTIVITY_FLAG_FLUSH_FORCED: hand over partly filled buffers too (after a device
synchronization every record of the call is complete)."""


# -- child side: the timer in the contestant ----------------------------------------------


def _dims(record: Any, what: str) -> tuple[int, int, int]:
    """A kernel record's grid or block (zeros where the record has none)."""
    x, y, z = (int(getattr(record, f"{what}_{axis}", 0) or 0) for axis in "xyz")
    return x, y, z


LAUNCH_APIS = ("cudaLaunch", "cudaGraphLaunch", "cuLaunch", "cuGraphLaunch")
"""Name prefixes of the runtime and driver functions that launch kernels (plain, extended,
cooperative, per-thread-stream and graph launches): the only API records a call's kernels
are matched to. A CUDA graph's kernels carry the graph launch's correlation id."""


def launch_cbids(members: Any) -> tuple[list[int], list[int]]:
    """(launch callback ids, all others) of a cbid enum such as cupti's
    ``runtime_api_trace_cbid``; its INVALID, SIZE and FORCE_INT markers are neither."""
    keep: list[int] = []
    drop: list[int] = []
    for name, member in members.__members__.items():
        if name in ("INVALID", "SIZE", "FORCE_INT"):
            continue
        (keep if name.startswith(LAUNCH_APIS) else drop).append(int(member))
    return keep, drop


def record_launches_only(cupti: Any) -> str:
    """Record API activity for launch functions only; 'launches', or why every API is kept.

    torch and Triton make a hundred runtime and driver calls around one launch (device and
    context queries, stream checks); each became a record that the forced flush after every
    call handed to Python, which took most of a timed call's time (docs/backends.md).
    Switching the others off after the kinds are on is CUPTI's documented per-function
    control (cuptiActivityEnableRuntimeApi / cuptiActivityEnableDriverApi). Where it fails,
    every API stays recorded: slower, with the same attribution.
    """
    try:
        for members, enable in (
            (cupti.runtime_api_trace_cbid, cupti.activity_enable_runtime_api),
            (cupti.driver_api_trace_cbid, cupti.activity_enable_driver_api),
        ):
            keep, drop = launch_cbids(members)
            if not keep:
                raise ValueError(f"{members.__name__} names no launch function")
            for cbid in drop:
                enable(cbid, 0)
            for cbid in keep:
                enable(cbid, 1)
    except Exception as exc:
        with contextlib.suppress(Exception):
            for kind in (cupti.ActivityKind.RUNTIME, cupti.ActivityKind.DRIVER):
                cupti.activity_enable(kind)  # enabling a kind again forgets per-function choices
        return f"all APIs recorded: the per-function switch failed ({type(exc).__name__}: {exc})"
    return "launches"


def _recorded_kinds(kinds: Any) -> tuple[Any, ...]:
    """The activity kinds the timer enables (and disables at its end)."""
    return (getattr(kinds, KERNEL_ACTIVITY), kinds.RUNTIME, kinds.DRIVER)


def _copy_kinds(kinds: Any) -> tuple[Any, ...]:
    """The copy and memset kinds: recorded for kernel sets only, never for the time."""
    return (kinds.MEMCPY, kinds.MEMSET)


@dataclass
class CuptiTimer:
    """Kernel activity of each timed call; `start` once per contestant, then `time_call`."""

    _cupti: Any = field(default=None, repr=False)
    _kernels: list[KernelActivity] = field(default_factory=list, repr=False)
    _apis: list[ApiActivity] = field(default_factory=list, repr=False)
    _copies: list[CopyActivity] = field(default_factory=list, repr=False)
    _errors: list[str] = field(default_factory=list, repr=False)
    _kernel_kinds: frozenset[int] = frozenset()
    _api_kinds: frozenset[int] = frozenset()
    _memcpy_kind: int = -1
    _memset_kind: int = -1
    _harness_thread: int | None = None
    api_filter: str = ""
    """After `start`: 'launches' when only launch APIs are recorded, else why all are."""
    copies_note: str = ""
    """After `start`: why copies and memsets are not recorded, when they are not."""
    watch_volatile: ClassVar[frozenset[str]] = frozenset(
        {"_kernels", "_apis", "_copies", "_errors", "outside", "_harness_thread", "snapshot"}
    )
    """Attributes each call rebinds; the integrity watch checks all the others."""
    outside: list[str] = field(default_factory=list)
    """After `time_call`: names of kernels another thread launched since the previous timed
    call ended (`launched_elsewhere`); empty when there were none."""
    snapshot: Any = None
    """After `time_call`: the output as the window left it (`events.output_changed`)."""

    def start(self) -> None:
        """Import cupti and enable kernel and launch-API activity for the whole process.

        Call before candidate code is imported (and before Landlock confinement, since the
        import loads libcupti): CUPTI then sees every launch, including the first ones.
        """
        from cupti import cupti  # the contestant's import; the server never does this

        kinds = cupti.ActivityKind
        self._cupti = cupti
        self._kernel_kinds = frozenset({int(kinds.CONCURRENT_KERNEL), int(kinds.KERNEL)})
        self._api_kinds = frozenset({int(kinds.RUNTIME), int(kinds.DRIVER)})
        cupti.activity_register_callbacks(self._buffer_requested, self._buffer_completed)
        for kind in _recorded_kinds(kinds):
            cupti.activity_enable(kind)
        self.api_filter = record_launches_only(cupti)
        try:
            memcpy, memset = _copy_kinds(kinds)
            cupti.activity_enable(memcpy)
            self._memcpy_kind = int(memcpy)
            cupti.activity_enable(memset)
            self._memset_kind = int(memset)
        except Exception as exc:  # kernel sets then hold the kernels (and what was enabled)
            self.copies_note = f"copies not all recorded ({type(exc).__name__}: {exc})"

    def stop(self) -> None:
        """Flush and disable (the contestant's exit; harmless when never started)."""
        if self._cupti is None:
            return
        cupti, self._cupti = self._cupti, None
        kinds = cupti.ActivityKind
        cupti.activity_flush_all(FLUSH_FORCED)
        for kind in _recorded_kinds(kinds):
            cupti.activity_disable(kind)
        for kind in (k for k in (self._memcpy_kind, self._memset_kind) if k >= 0):
            with contextlib.suppress(Exception):
                cupti.activity_disable(kinds(kind))

    @staticmethod
    def _buffer_requested() -> tuple[int, int]:
        return BUFFER_BYTES, 0  # 0: as many records as fit

    def _buffer_completed(self, activities: Sequence[Any]) -> None:
        # May run on a CUPTI thread: only appends (atomic under the GIL), never raises.
        try:
            for a in activities:
                kind = int(a.kind)
                if kind in self._kernel_kinds:
                    name = a.name
                    if isinstance(name, bytes):
                        name = name.decode(errors="replace")
                    self._kernels.append(
                        KernelActivity(
                            name=str(name),
                            start=int(a.start),
                            end=int(a.end),
                            stream=int(a.stream_id),
                            correlation_id=int(a.correlation_id),
                            graph_id=int(getattr(a, "graph_id", 0) or 0),
                            grid=_dims(a, "grid"),
                            block=_dims(a, "block"),
                        )
                    )
                elif kind in (self._memcpy_kind, self._memset_kind):
                    memcpy = kind == self._memcpy_kind
                    self._copies.append(
                        CopyActivity(
                            copy_kind(int(a.copy_kind) if memcpy else None),
                            int(a.bytes),
                            int(a.start),
                            int(a.end),
                            int(a.correlation_id),
                        )
                    )
                elif kind in self._api_kinds:
                    thread = int(getattr(a, "thread_id", 0) or 0)
                    self._apis.append(
                        ApiActivity(int(a.start), int(a.end), int(a.correlation_id), thread)
                    )
        except Exception as exc:
            self._errors.append(f"{type(exc).__name__}: {exc}")

    def _take(self) -> tuple[list[KernelActivity], list[ApiActivity], list[CopyActivity]]:
        kernels, apis, copies = self._kernels, self._apis, self._copies
        self._kernels, self._apis, self._copies = [], [], []
        return kernels, apis, copies

    def time_call(
        self, device: Device | None, fn: Callable[[], Any], settle: Settle | None = None
    ) -> tuple[Any, float, list[KernelSpan]]:
        """Run ``fn`` once: (its result, settled; host-inclusive ns, its kernels in order)."""
        t0 = self.open_window(device)
        got = [fn()]
        # The output as the window left it (settled: contestant/call_guard.py), copied before
        # CUPTI's flush gives a thread that still writes it time to finish; the contestant
        # compares it with the delivered one.
        self.snapshot = None
        ns, spans = self.close_window(t0, lambda: self._snap(got, settle))
        return got[0], ns, spans

    def _snap(self, got: list[Any], settle: Settle | None) -> None:
        got[0] = got[0] if settle is None else settle(got[0])
        self.snapshot = snapshot_inputs(((got[0],), {}))

    def open_window(self, device: Device | None) -> int:
        """Start a timed window (after the L2 flush, when a device is given); its CUPTI
        timestamp, for `close_window`. The `@kernel` mode's regions open one each."""
        cupti = self._cupti
        if cupti is None:
            raise NsightCoreError(
                ErrorClass.PROFILER_ERROR,
                "the cupti timer was not started in this contestant",
                "report this: the contestant must call CuptiTimer.start() first",
            )
        sync_all()  # what ran before this call has ended; its records come with the call's
        if device is not None:
            device.flush_l2()
            sync_all()  # the flush kernel ends before the window opens
        return int(cupti.get_timestamp())

    def close_window(
        self, t0: int, at_close: Callable[[], Any] | None = None
    ) -> tuple[float, list[KernelSpan]]:
        """End the window `open_window` started: (host-inclusive ns, its kernels in start
        order). ``at_close`` runs right after the window's end, before the records are read."""
        cupti = self._cupti
        assert cupti is not None  # open_window checked it
        sync_all()
        t1 = int(cupti.get_timestamp())
        if at_close is not None:
            at_close()
        cupti.activity_flush_all(FLUSH_FORCED)  # one flush a call: each costs milliseconds
        kernels, apis, copies = self._take()
        if self._errors:
            errors, self._errors = self._errors, []
            raise NsightCoreError(
                ErrorClass.PROFILER_ERROR,
                f"reading CUPTI activity records failed: {'; '.join(errors[:3])}",
                "check that cupti-python fits the driver (check_environment)",
            )
        before, mine, after = split_by_launch(kernels, apis, t0, t1)
        # Launched after t1 (another thread, while this one flushed): the next call's
        # "before"; their API records travel with them.
        _, my_copies, late_copies = split_by_launch(copies, apis, t0, t1)
        late = {k.correlation_id for k in after} | {c.correlation_id for c in late_copies}
        self._kernels[:0] = after
        self._copies[:0] = late_copies
        self._apis[:0] = [a for a in apis if a.start > t1 or a.correlation_id in late]
        self._harness_thread = harness_thread(apis, t0)
        self.outside = sorted(
            {kernel_name(k.name) for k in launched_elsewhere(before, apis, self._harness_thread)}
        )
        bad = incomplete(mine)
        if bad:
            raise NsightCoreError(
                ErrorClass.PROFILER_ERROR,
                f"CUPTI gave no timestamps for {len(bad)} kernel(s) of this call "
                f"({', '.join(sorted({k.name for k in bad})[:3])})",
                "run again; if it persists, use backend 'ncu' or 'events'",
            )
        return float(t1 - t0), call_spans(mine, my_copies)


# -- the contestant's timer and the registered backend ------------------------------------


def _timing(k: KernelSpan) -> KernelTiming:
    return KernelTiming(
        name=k.name,
        start_ns=k.start_ns,
        end_ns=k.end_ns,
        stream=k.stream,
        launch=k.launch,
        kind=k.kind,
    )


class CuptiCallTimer(CallTimer):
    """The contestant's side of the cupti backend: each call's kernels from CUPTI."""

    kind = "cupti"
    external = False
    relies_on = (
        *REPLY_PATH,
        "cupti",
        "cupy.cuda",
        "nsight_core.collectors.events",
        "nsight_core.collectors.l2_persist",
        "nsight_core.collectors.cupti",
        "nsight_core.collectors.cupti_records",
        "nsight_core.collectors.timers.CallTimer",
        "nsight_core.collectors.timers.TimedCall",
    )
    """CUPTI's records and clock, the L2 flush (events.Device) and the harness's sync;
    never the host clocks or CUDA events the events backend reads."""

    def __init__(self) -> None:
        self._timer = CuptiTimer()

    def start(self) -> None:
        self._timer.start()

    def notes(self) -> list[str]:
        api_filter, copies = self._timer.api_filter, self._timer.copies_note
        notes = [] if api_filter in ("", "launches") else [f"cupti: {api_filter}"]
        return notes + ([f"cupti: {copies}"] if copies else [])

    def time_call(
        self, device: Device, key: RunKey, fn: Callable[[], Any], settle: Settle | None = None
    ) -> TimedCall:
        out, ns, spans = self._timer.time_call(device, fn, settle)
        kernels = [_timing(k) for k in spans]
        snapshot, self._timer.snapshot = self._timer.snapshot, None
        return TimedCall(out, ns, kernels, self._timer.outside[:8], snapshot=snapshot)

    def region(self) -> Callable[[], RegionTiming]:
        """The `@kernel` mode's region: its kernels from CUPTI, as a request's call (no L2
        flush: the user's function decides what the cache holds, as under Nsight Python)."""
        t0 = self._timer.open_window(None)

        def stop() -> RegionTiming:
            ns, spans = self._timer.close_window(t0)
            return ns, [_timing(k) for k in spans]

        return stop


CUPTI = register(CuptiBackend())
