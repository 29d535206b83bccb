"""The events timer's guard around a call's window on torch's CUDA device (`WindowGuard`).

A window is only worth its number if the call's work is inside it: work queued on a stream
torch hands out must not start before the window, and work left running after it (a stream
never joined, a thread still launching, work moved into the output's copy) must be seen.
`events.Device.time_checked` reads the intervals (`AfterWindow`); this module turns them
into the work after the window that collectors/late.py judges.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

POOL_SCAN = 64
"""Streams asked of torch's pool per priority to see all of it: torch hands its pool's
streams out round robin (32 per priority), so twice that leaves its counter where it was."""
PRIORITY_LEVELS = 8
"""Priorities tried (0, -1, ...); torch maps one beyond its range to the nearest, whose pool
then brings no new stream and ends the scan."""
COPY_MARGIN = 2.0
"""An output's copy counts as work after the window only beyond twice a dense copy of its
bytes: a strided output is made contiguous first, one more pass over its bytes."""


RECORD_SLACK_NS = 2_000.0
"""Event timestamps and the host clock read around them disagree by a microsecond or so."""
TAIL_NOISE_NS = 50_000.0
"""The device's busy time after the output's copy is read through a host synchronization,
whose wake-up varies by tens of microseconds between two reads on a quiet host; only work
beyond that counts (the output's read-back catches work that writes the output later). The
host first waits for the harness's stream alone, so the wake-up from a long wait (a long
stream hold) is not in the reading."""


def torch_streams(torch: Any) -> list[Any]:
    """Every stream torch hands out without being given a handle: its default stream and
    the pool behind ``torch.cuda.Stream()`` at each priority."""
    seen = {torch.cuda.default_stream().cuda_stream: torch.cuda.default_stream()}
    for priority in range(0, -PRIORITY_LEVELS, -1):
        new = 0
        for _ in range(POOL_SCAN):
            s = torch.cuda.Stream(priority=priority)
            if s.cuda_stream not in seen:
                seen[s.cuda_stream] = s
                new += 1
        if not new and priority:
            break
    return list(seen.values())


@dataclass
class WindowGuard:
    """Keeps a call's work inside its window, and measures what escapes it.

    Before the window: the sleeping kernel holds the harness's stream only, so work a call
    queues on a stream of its own would run during the hold, before the start event, and
    be timed by nothing. So each stream torch hands out (its default stream and its pool)
    waits for the start event: an honest call that forks a stream from the current one waits
    there anyway, and one that does not can no longer start before the window. Streams a
    call makes by other means (cupy's blocking streams wait for torch's legacy default
    stream anyway; a non-blocking stream made through the driver does not) stay in reach.

    After the window: the output is copied on the harness's stream (`Device.time_checked`)
    and the device synchronized; `after_parts` turns what the events and the host clock
    read into the work the call left behind. The streams and the honest copy's cost are
    bound at the first hold (the reference's first timed call, before any candidate
    exists) and watched like the hold."""

    streams: list[Any] | None = None
    """torch's streams a candidate can get without a handle (`torch_streams`)."""
    copy_base_ns: float = 0.0
    copy_ns_per_byte: float = 0.0
    """A dense device copy's cost: fixed part and per byte (timed on the flush buffer)."""

    def bind(self, torch: Any, flush_buffer: Any) -> None:
        """Find torch's streams and time a dense copy, once per process."""
        if self.streams is not None:
            return
        self.streams = torch_streams(torch)
        with contextlib.suppress(Exception):
            self.copy_base_ns, self.copy_ns_per_byte = _copy_cost(torch, flush_buffer)

    def hold_others(self, torch: Any, start: Any) -> None:
        """Make every other known stream wait for ``start`` (no host synchronization)."""
        current = torch.cuda.current_stream().cuda_stream
        for s in self.streams or ():
            if s.cuda_stream != current:
                s.wait_event(start)

    def honest_copy_ns(self, nbytes: int) -> float:
        return self.copy_base_ns + self.copy_ns_per_byte * nbytes

    def after_parts(self, seen: AfterWindow, nbytes: int) -> dict[str, float]:
        """Work a call left after its window (ns), by where it ran (`AFTER_PARTS`), from
        what `_time_guarded` read.

        Work queued on the harness's stream behind the window shows as a device gap between
        the end event and the copy's start, and work done in the copy as a longer copy; on
        an idle device both intervals are the host's own time between the records, which is
        taken off (and the copy is allowed `COPY_MARGIN` honest copies). The device's busy
        time after the copy is read through a host synchronization, so only what exceeds
        `TAIL_NOISE_NS` counts. A thread the call started that still runs after its copy
        counts for as long as it ran on."""
        allowed = seen.host_copy_ns + RECORD_SLACK_NS
        if self.copy_ns_per_byte:  # the copy's honest part is the harness's, not the call's
            allowed = max(allowed, COPY_MARGIN * self.honest_copy_ns(nbytes))
        return {
            "stream": max(seen.gap_ns - seen.host_gap_ns - RECORD_SLACK_NS, 0.0),
            "copy": max(seen.copy_ns - allowed, 0.0),
            "device": max(seen.rest_ns - TAIL_NOISE_NS, 0.0),
            "thread": seen.outlived_ns,
        }


AFTER_PARTS = {
    "stream": "queued behind the window on the caller's stream",
    "copy": "inside the output's copy",
    "device": "on the device after the output's copy (another stream)",
    "thread": "in a thread the call left running",
}
"""Where work after a window ran (`WindowGuard.after_parts`), as a Reason names it."""


@dataclass(frozen=True)
class AfterWindow:
    """What one guarded call's events and host clock read after its window (ns)."""

    gap_ns: float
    """End event to the copy's start event, on the harness's stream."""
    host_gap_ns: float
    """The host's time between recording those two."""
    copy_ns: float
    """The output's copy, between its two events."""
    host_copy_ns: float
    """The host's time between recording those two."""
    rest_ns: float
    """The device busy once the harness's stream is done (the copy), less the host's time
    for the same synchronization on an idle device."""
    outlived_ns: float
    """How long threads the call started ran on after it returned (0.0: none did)."""


def _copy_cost(torch: Any, buf: Any) -> tuple[float, float]:
    """(fixed ns, ns per byte) of a dense device-to-device copy, from two sizes."""
    half = int(buf.numel()) // 2

    def timed(n: int) -> float:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        best = float("inf")
        for _ in range(3):
            a.record()
            buf[half : half + n].copy_(buf[:n])
            b.record()
            b.synchronize()
            best = min(best, float(a.elapsed_time(b)) * 1e6)
        return best

    small, big = timed(256), timed(half)
    per_byte = max(big - small, 0.0) / max((half - 256) * 4, 1)
    return small, per_byte


THREAD_WAIT_S = 0.2
"""How long the host-clock timer waits for threads a call started and left running; one
still alive then counts as working this long after the window."""


def outlived(born: Sequence[threading.Thread], t_ret: int) -> float:
    """How long after ``t_ret`` (the call's return, ns) the threads the call started ran on:
    on a CPU the analogue of a stream never joined (0.0 when none outlived the call)."""
    deadline = t_ret + THREAD_WAIT_S * 1e9
    last = t_ret
    for thread in born:
        if thread.is_alive():
            thread.join(max(deadline - time.perf_counter_ns(), 0.0) / 1e9)
            last = max(last, min(time.perf_counter_ns(), int(deadline)))
    return float(last - t_ret)
