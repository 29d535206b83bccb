"""The `events` backend, child side: time one call with CUDA events or a host clock.

Runs inside the worker. On a GPU (torch or cupy arguments on a CUDA device) each sample is
CUDA-event time around the call after the L2 cache was flushed by reading a buffer twice its
size, with the stream held while the call launches (`StreamHold`), so the window is the
call's GPU work; on a CPU it is `perf_counter_ns` around the call. Inputs are made outside
the timed region by the worker. The numbers include the gaps between a call's kernels, so
they are not ncu's `gpu__time_duration`; rows say which backend made them.

A window is only worth its number if the call is done when it closes (`Device.time_checked`):
the output is copied as the window left it and compared with what it is once the device is
idle; on torch's CUDA device the other streams torch hands out wait for the window's start,
and how long the device stayed busy past the window's end is measured (`WindowGuard`;
collectors/late.py judges it).

Frameworks are found through `sys.modules` (the candidate's imports), never imported here.

Parent side (`EventsBackend`, registered here): the judge's samples of a call and the
records read from them live in `collectors.events_samples`, which the contestant never runs.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from nsight_core.collectors.base import register
from nsight_core.collectors.events_samples import EventsBackend
from nsight_core.collectors.l2_persist import PersistingL2
from nsight_core.collectors.window_guard import AfterWindow, WindowGuard, outlived
from nsight_core.runtime.check import mutated, snapshot_inputs
from nsight_core.runtime.leaves import leaves

OUTPUT_CHANGED = (
    "output changed after the call returned: part of it was written after the timed "
    "window closed (a stream never joined to the caller's, or a thread still writing)"
)
"""The finding when the output, once in the judge's slot, differs from the copy taken as
the window closed: a call's output must be complete when it returns (`output_changed`)."""

Settle = Callable[[Any], Any]
"""Hands the harness a call's output as its window left it (`contestant.call_guard`): a
timer that reads the output before returning it calls this first, right after its end read,
so no code of the candidate's runs when the timer's snapshot reads it."""

L2_FLUSH_FACTOR = 2
"""Read twice the L2 size so no line of the previous call's data survives.

Reading, not writing: a write flush leaves the L2 full of dirty lines, and the timed kernel
then pays for their write-back (docs/backends.md has how much), while ncu's cache control
leaves the L2 clean."""


_FLUSH_BUFFERS: dict[str, Any] = {}
"""The L2 flush buffer of each device kind in this process (only ever read)."""

HOLD_FIRST_NS = 2_000_000
"""The stream hold of a caller's first timed call: longer than any launch path we have
seen (a Triton launch takes tens of microseconds); later holds follow its launches seen."""
HOLD_MIN_NS = 100_000
HOLD_MAX_NS = 50_000_000
HOLD_MARGIN = 3.0
"""Each hold lasts this many times the caller's longest launch path so far (within the
bounds)."""


@dataclass
class StreamHold:
    """Holds the stream with a sleeping kernel while a call is launched, so the call's
    events time its GPU work alone: the technique nvbench uses for cold measurements.

    Without it the window opened when the host recorded the start event and the GPU was
    idle, so every kernel waited for its own launch, and a launcher that costs more than
    its kernel (Triton's) was timed as GPU time: events ranked a 9 us Triton kernel below
    an 11 us torch one. With it the start event waits behind the sleeping kernel until the
    whole call is queued, and the kernels run back to back. A call that outlasts its hold
    (it synchronizes inside, or launches for longer than any call of its own before) gets
    the old window for that sample, and its next hold is longer; `unheld` counts those.

    Each caller (an annotation) has holds sized from its own launches: one candidate whose
    call takes 50 ms on the host would otherwise hold every other candidate's calls that
    long, which costs wall time and leaves the host asleep in a long synchronization, whose
    late wake-up then reads as work after their windows.

    It runs before the window opens, so candidate code that reached it could do its work
    there: the sleeping kernel is bound at the first hold (the reference's first timed
    call, before any candidate is imported), the hold belongs to the `Device` the harness
    holds, and the integrity watch checks every attribute but the two each call moves."""

    ns_per_cycle: float | None = None
    sleep: Callable[[int], None] | None = None
    """torch.cuda._sleep as it was at the first hold; a later rebinding never reaches here."""
    longest: dict[str, float] = field(default_factory=dict)
    """Each caller's longest launch path so far (ns)."""
    unheld: int = 0
    watch_volatile: ClassVar[frozenset[str]] = frozenset({"longest", "unheld"})
    """Attributes each call moves; the integrity watch checks all the others."""

    def hold(self, torch: Any, who: str = "") -> float:
        """Queue the sleeping kernel for a call of ``who``; the hold's length in ns (0: no
        hold possible here)."""
        if self.ns_per_cycle is None:
            self.sleep = getattr(torch.cuda, "_sleep", None)
            self.ns_per_cycle = _ns_per_cycle(torch, self.sleep) if self.sleep else 0.0
        if not self.ns_per_cycle or self.sleep is None:
            return 0.0
        seen = self.longest.get(who)
        hold_ns = (
            HOLD_FIRST_NS
            if seen is None
            else min(max(HOLD_MARGIN * seen, HOLD_MIN_NS), HOLD_MAX_NS)
        )
        self.sleep(int(hold_ns / self.ns_per_cycle))
        return hold_ns

    def launched(self, launch_ns: float, held_ns: float, who: str = "") -> None:
        """Fit ``who``'s next hold to its launch paths; count a launch that outlasted its hold."""
        if held_ns and launch_ns >= held_ns:
            self.unheld += 1
        self.longest[who] = max(self.longest.get(who, 0.0), launch_ns)


def _ns_per_cycle(torch: Any, sleep: Callable[[int], None]) -> float:
    """The sleeping kernel's speed on this GPU, timed once per process (0.0: unusable)."""
    cycles = 1_000_000
    try:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        sleep(cycles // 10)  # its first launch loads the module
        start.record()
        sleep(cycles)
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) * 1e6 / cycles
    except Exception:
        return 0.0


@dataclass
class Checked:
    """One timed call and what the timer saw of it."""

    out: Any
    ns: float
    latency_ns: float | None = None
    """Host-inclusive latency (`events_samples.EVENTS_LATENCY`; None: not measured here)."""
    snapshot: Any = None
    """The output as the window left it (`output_changed`)."""
    after_parts: dict[str, float] | None = None
    """Work seen after the window beyond an honest call's, ns, by where it ran
    (`window_guard.AFTER_PARTS`; None: not measured here)."""


@dataclass
class Device:
    """Where the arguments live, and how to synchronize and time there."""

    kind: str  # "torch-cuda" | "cupy" | "cpu"
    name: str = "cpu"
    stream_hold: StreamHold = field(default_factory=StreamHold, compare=False)
    """Its timed calls' stream hold (torch's CUDA device only)."""
    window_guard: WindowGuard = field(default_factory=WindowGuard, compare=False)
    """What keeps its timed calls' work inside their windows (torch's CUDA device only)."""
    persisting_l2: PersistingL2 = field(default_factory=PersistingL2, compare=False)
    """Reset before each flush: lines marked persisting would survive it (l2_persist.py)."""

    def __post_init__(self) -> None:
        if self.kind != "cpu":
            self.persisting_l2.bind()

    def stream(self) -> int:
        """The harness's current stream handle (0 on the CPU)."""
        if self.kind == "torch-cuda":
            return int(sys.modules["torch"].cuda.current_stream().cuda_stream)
        if self.kind == "cupy":
            return int(sys.modules["cupy"].cuda.get_current_stream().ptr)
        return 0

    def sync(self) -> None:
        if self.kind == "torch-cuda":
            sys.modules["torch"].cuda.synchronize()
        elif self.kind == "cupy":
            sys.modules["cupy"].cuda.Device().synchronize()

    def flush_l2(self) -> None:
        if self.kind == "cpu":
            return
        buf = _FLUSH_BUFFERS.get(self.kind)
        if buf is None:
            # One buffer per framework and process: a pre-started contestant makes it
            # before its job (warm_gpu_path), so no call pays for 100+ MB of allocation.
            buf = _FLUSH_BUFFERS[self.kind] = self._alloc_flush_buffer()
        self.persisting_l2.reset(self.stream())
        buf.sum()  # a float32 view: one reduction reads every line

    def _alloc_flush_buffer(self) -> Any:
        if self.kind == "torch-cuda":
            torch = sys.modules["torch"]
            l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20))
            n = max(l2, 1 << 20) * L2_FLUSH_FACTOR // 4
            return torch.zeros(n, dtype=torch.float32, device="cuda")
        cupy = sys.modules["cupy"]
        l2 = int(cupy.cuda.runtime.getDeviceProperties(0).get("l2CacheSize", 64 << 20))
        return cupy.zeros(max(l2, 1 << 20) * L2_FLUSH_FACTOR // 4, dtype=cupy.float32)

    def time_call(self, fn: Callable[[], Any], who: str = "") -> tuple[Any, float]:
        """Run `fn` once and return (its result, elapsed ns).

        On torch's CUDA device the stream is held while `fn` launches (`StreamHold`), so the
        window is the call's GPU work, not its launch path; elsewhere the flush kernel, still
        running while `fn` launches, hides what launch latency it can.
        """
        self.sync()
        self.flush_l2()
        if self.kind == "cpu":
            t0 = time.perf_counter_ns()
            out = fn()
            return out, float(time.perf_counter_ns() - t0)
        if self.kind == "torch-cuda":
            torch = sys.modules["torch"]
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            held = self.stream_hold.hold(torch, who)
            t0 = time.perf_counter_ns()
            start.record()
            out = fn()
            end.record()
            self.stream_hold.launched(float(time.perf_counter_ns() - t0), held, who)
            end.synchronize()
            return out, float(start.elapsed_time(end)) * 1e6
        cupy = sys.modules["cupy"]
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        out = fn()
        end.record()
        end.synchronize()
        return out, float(cupy.cuda.get_elapsed_time(start, end)) * 1e6

    def time_checked(
        self,
        fn: Callable[[], Any],
        prelude: Callable[[], None] | None = None,
        who: str = "",
        settle: Settle | None = None,
    ) -> Checked:
        """Run ``fn`` once as a timed call; its time, and what the timer saw after the window.

        The output is copied as the window left it (`Checked.snapshot`: the contestant
        compares it with the output once that is in the judge's slot, `output_changed`).
        On torch's CUDA device that copy is queued right behind the end event on the
        harness's stream, and the window is guarded (`WindowGuard`). ``prelude`` (the
        inputs' unmasking) runs on the harness's stream behind the hold there, so the inputs
        can be read only once the window's start is queued; elsewhere right before the
        clock starts. ``settle`` runs right after the window's end, before the snapshot.
        """
        if self.kind == "torch-cuda":
            return self._time_guarded(fn, prelude, who, settle)
        if prelude is not None:
            prelude()
            self.sync()
        if self.kind == "cupy":
            out, ns = self.time_call(fn, who)
            out = settle(out) if settle is not None else out
            return Checked(out, ns, snapshot=snapshot_inputs(((out,), {})))
        before = set(threading.enumerate())
        out, ns = self.time_call(fn, who)
        t_ret = time.perf_counter_ns()
        out = settle(out) if settle is not None else out
        snap = snapshot_inputs(((out,), {}))  # before anything else touches it
        born = [t for t in threading.enumerate() if t not in before]
        return Checked(out, ns, ns, snap, {"thread": outlived(born, t_ret)})

    def _time_guarded(
        self,
        fn: Callable[[], Any],
        prelude: Callable[[], None] | None = None,
        who: str = "",
        settle: Settle | None = None,
    ) -> Checked:
        torch = sys.modules["torch"]
        self.sync()
        self.flush_l2()
        guard = self.window_guard
        guard.bind(torch, _FLUSH_BUFFERS.get(self.kind))

        def event() -> Any:
            return torch.cuda.Event(enable_timing=True)

        start, end, copy_start, copied, mid, idle, woke = (event() for _ in range(7))
        held = self.stream_hold.hold(torch, who)
        t0 = time.perf_counter_ns()  # the hold covers the unmasking's launch too
        if prelude is not None:
            prelude()
        before = set(threading.enumerate())
        start.record()
        guard.hold_others(torch, start)
        t_call = time.perf_counter_ns()
        out = fn()
        end.record()
        t_ret = time.perf_counter_ns()
        self.stream_hold.launched(float(t_ret - t0), held, who)  # it covers the waits too
        out = settle(out) if settle is not None else out  # host time, counted as such below
        t_copy = time.perf_counter_ns()
        copy_start.record()
        snap = snapshot_inputs(((out,), {}))  # the output as the window left it
        copied.record()
        t_copied = time.perf_counter_ns()
        born = [t for t in threading.enumerate() if t not in before]
        # The harness's stream first: the host's wait for the hold, the window and the copy
        # (long when the hold is) ends here, and its wake-up is no one's work.
        copied.synchronize()
        mid.record()
        ran_on = outlived(born, t_ret) if born else 0.0  # after the copy: its writes show
        sync_all()  # the whole device: every stream, whoever launched on it
        idle.record()
        idle.synchronize()
        sync_all()  # the same short wait on an idle device: the host's own time
        woke.record()
        woke.synchronize()
        ns = float(start.elapsed_time(end)) * 1e6
        seen = AfterWindow(
            gap_ns=float(end.elapsed_time(copy_start)) * 1e6,
            host_gap_ns=float(t_copy - t_ret),
            copy_ns=float(copy_start.elapsed_time(copied)) * 1e6,
            host_copy_ns=float(t_copied - t_copy),
            rest_ns=float(mid.elapsed_time(idle) - idle.elapsed_time(woke)) * 1e6,
            outlived_ns=ran_on,
        )
        parts = guard.after_parts(seen, _nbytes(out))
        return Checked(out, ns, float(t_ret - t_call) + ns, snap, parts)


def output_changed(snapshot: Any, out: Any) -> list[str]:
    """`OUTPUT_CHANGED` when ``out`` differs from ``snapshot``, the copy of it taken as its
    window closed (`Device.time_checked`); empty otherwise."""
    if snapshot is None:
        return []
    return [OUTPUT_CHANGED] if mutated(snapshot, ((out,), {})) else []


def _nbytes(out: Any) -> int:
    """Bytes of the arrays in an output (tensors and arrays with ``nbytes``)."""
    total = 0
    for leaf in leaves(out):
        n = getattr(leaf, "nbytes", None)
        if isinstance(n, int):
            total += n
    return total


def sync_all() -> None:
    """Wait for every framework's GPU work (torch if CUDA is initialized, cupy if imported), so
    a range or a timer encloses what a call launched."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        with contextlib.suppress(Exception):  # no device: nothing to wait for
            cupy.cuda.Device().synchronize()


def detect_device(args: Any) -> Device:
    """The device of the first GPU array among the arguments, else the CPU."""
    torch = sys.modules.get("torch")
    cupy = sys.modules.get("cupy")
    for leaf in leaves(args):
        if torch is not None and isinstance(leaf, torch.Tensor) and leaf.is_cuda:
            return Device("torch-cuda", f"cuda:0 ({torch.cuda.get_device_name(0)})")
        if cupy is not None and isinstance(leaf, cupy.ndarray):
            name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
            return Device("cupy", f"cuda:0 ({name.decode() if isinstance(name, bytes) else name})")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        # GPU work on CPU-made arguments (e.g. a candidate that moves data itself).
        return Device("torch-cuda", f"cuda:0 ({torch.cuda.get_device_name(0)})")
    return Device("cpu", "cpu")


def start_timer() -> Callable[[], float]:
    """Start timing a region (the `@kernel` mode's annotate); the stopper returns ns.

    The GPU clock is used when torch has initialized CUDA (the region's work is then on
    the GPU); otherwise the host clock after the region's work is done.
    """
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()

        def stop_gpu() -> float:
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end)) * 1e6

        return stop_gpu
    t0 = time.perf_counter_ns()
    return lambda: float(time.perf_counter_ns() - t0)


EVENTS = register(EventsBackend())
