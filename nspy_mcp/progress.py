"""Turn the worker's progress events into what an MCP client shows: a percentage and a line.

The worker reports `ProgressEvent`s per phase (check: seeds done per config; profile: calls
done of all calls). `ProgressTracker` folds them into one monotone percentage over the whole
job (MCP requires progress to increase), a message naming the phase, candidate, config and
run, and an estimate of the time left once profiling has started. A staged request
(nsight_core/stages.py) also reports each stage's start: the stage gets its share of the bar,
the line names it, and its ETA comes from the screen's measured pace (`StageEta`). The tracker is fed from
the engine's thread and read from the event loop, so it guards its state with a lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from nsight_core.protocol import ProgressEvent
from nsight_core.request import ProfileRequest
from nsight_core.stages import StageUpdate

PROGRESS_TOTAL = 100.0

# Share of the bar per phase. Profiling dominates a job's time (runs x annotations x
# configs calls, each with fresh inputs and, under ncu, replay), so it gets most of it.
_PHASE_SPAN: dict[str, tuple[float, float]] = {
    "import": (0.0, 5.0),
    "check": (5.0, 25.0),
    "warmup": (25.0, 30.0),
    "profile": (30.0, 100.0),
}

# Share of the bar per stage of a staged request; each stage's phases fill its share. The
# profile stage (ncu, several replay passes per kernel) dominates a staged job's time.
_STAGE_SPAN: dict[str, tuple[float, float]] = {
    "screen": (0.0, 30.0),
    "profile": (30.0, 100.0),
}


@dataclass(frozen=True)
class ProgressUpdate:
    """One progress notification: `progress` of `total`, a human line, and the time left."""

    progress: float
    total: float
    message: str
    eta_s: float | None = None
    overdue_s: float = 0.0
    """How long the job has run past its estimate (read long after the last event: a slow
    or hung call, which its own limit ends: docs/errors.md)."""

    def eta_text(self) -> str:
        if self.overdue_s >= 1.0:
            return (
                f"{round(self.overdue_s)} s past its estimate: a call is slow or hung "
                "(each candidate call has a limit of its own)"
            )
        if self.eta_s is None:
            return "time left not known yet"
        return f"about {max(1, round(self.eta_s))} s left"


class ProgressTracker:
    """Folds engine progress events of one job into monotone `ProgressUpdate`s."""

    def __init__(
        self, request: ProfileRequest, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._configs = max(1, len(request.configs))
        self._clock = clock
        self._lock = threading.Lock()
        self._started = clock()
        self._profile_t0: float | None = None
        self._last_non_profile = self._started
        self._latest = ProgressUpdate(0.0, PROGRESS_TOTAL, "queued")
        self._latest_at = self._started
        self._stage: StageUpdate | None = None
        self._stage_t0 = self._started

    @property
    def latest(self) -> ProgressUpdate:
        """The last update, its time left counted down to now: an estimate read a minute
        after it was made must not still say "about 1 s left"."""
        now = self._clock()
        with self._lock:
            latest, at = self._latest, self._latest_at
        if latest.eta_s is None:
            return latest
        left = latest.eta_s - (now - at)
        return replace(latest, eta_s=max(0.0, left), overdue_s=max(0.0, -left))

    def note(self, message: str) -> ProgressUpdate:
        """A state change without engine progress (queued, started); keeps the percentage."""
        with self._lock:
            if message == "started":
                self._started = self._last_non_profile = self._clock()
            self._latest = ProgressUpdate(
                self._latest.progress, PROGRESS_TOTAL, message, self._latest.eta_s
            )
            return self._latest

    def stage(self, update: StageUpdate) -> ProgressUpdate:
        """A stage of a staged request starts: later events fill its share of the bar.

        Its ETA comes from the screen's measurements (`StageEta`) when it has them.
        """
        with self._lock:
            self._stage = update
            self._stage_t0 = self._last_non_profile = self._clock()
            self._profile_t0 = None
            lo, _ = _STAGE_SPAN.get(update.stage, (0.0, 100.0))
            eta = update.eta.eta_s(0.0, update.calls) if update.eta is not None else None
            self._latest = ProgressUpdate(
                max(self._latest.progress, lo), PROGRESS_TOTAL, self._stage_text("started"), eta
            )
            self._latest_at = self._stage_t0
            return self._latest

    def _stage_text(self, what: str) -> str:
        s = self._stage
        if s is None:
            return what
        return f"stage {s.index + 1}/{s.count} {s.stage} ({s.backend}): {what}"

    def update(self, ev: ProgressEvent) -> ProgressUpdate:
        now = self._clock()
        with self._lock:
            lo, hi = _PHASE_SPAN.get(ev.phase, (0.0, 100.0))
            if self._stage is not None:
                s_lo, s_hi = _STAGE_SPAN.get(self._stage.stage, (0.0, 100.0))
                scale = (s_hi - s_lo) / PROGRESS_TOTAL
                lo, hi = s_lo + lo * scale, s_lo + hi * scale
            fraction = _fraction(ev, self._configs)
            eta: float | None = None
            stage_eta = self._stage.eta if self._stage is not None else None
            if stage_eta is not None:
                assert self._stage is not None
                left = ev.total - ev.done if ev.phase == "profile" else self._stage.calls
                eta = stage_eta.eta_s(now - self._stage_t0, left)
            elif ev.phase == "profile":
                if self._profile_t0 is None:
                    # Profiling starts after the last check/warm-up event: time from there.
                    self._profile_t0 = self._last_non_profile
                elapsed = now - self._profile_t0
                if ev.done > 0 and ev.total >= ev.done:
                    eta = elapsed / ev.done * (ev.total - ev.done)
            if ev.phase != "profile":
                self._last_non_profile = now
            progress = max(self._latest.progress, lo + (hi - lo) * fraction)
            message = self._stage_text(_describe(ev))
            self._latest = ProgressUpdate(round(progress, 2), PROGRESS_TOTAL, message, eta)
            self._latest_at = now
            return self._latest


def _fraction(ev: ProgressEvent, configs: int) -> float:
    if ev.total <= 0:
        return 0.0
    within = min(1.0, max(0.0, ev.done / ev.total))
    if ev.phase == "check" and ev.config_id is not None:
        # Check events count seeds within one config; configs are checked in order.
        return min(1.0, (ev.config_id + within) / configs)
    return within


def _describe(ev: ProgressEvent) -> str:
    parts: list[str] = [ev.phase]
    if ev.annotation is not None:
        parts.append(ev.annotation)
    if ev.config_id is not None:
        parts.append(f"config {ev.config_id}")
    if ev.run is not None:
        parts.append(f"run {ev.run}")
    unit = "seeds" if ev.phase == "check" else "calls"
    return f"{' '.join(parts)} ({ev.done}/{ev.total} {unit})"
