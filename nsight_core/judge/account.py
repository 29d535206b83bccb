"""What a job's judge writes and adds up as it goes: its events, its phases' seconds, its own
time and its notes, shared by the parts of the judge (core.py, calls.py, config_run.py).

Runs in the trusted judge process, like everything in judge/.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from nsight_core.protocol import Phase, PhaseEvent
from nsight_core.runtime.process import EventWriter


class Account:
    """The job's events.jsonl and the numbers its done event reports."""

    def __init__(self, events: EventWriter) -> None:
        self.events = events
        self.phase_seconds: dict[str, float] = {}
        self.judge_s = 0.0
        """The judge's own time on the calls' path (inputs, slots, the reference, checks)."""
        self.notes: list[str] = []

    @contextlib.contextmanager
    def phase(self, name: Phase) -> Any:
        t0 = time.monotonic()
        self.events.emit(PhaseEvent(phase=name, state="start", t=t0))
        try:
            yield
        finally:
            t1 = time.monotonic()
            self.phase_seconds[name] = self.phase_seconds.get(name, 0.0) + (t1 - t0)
            self.events.emit(PhaseEvent(phase=name, state="end", t=t1))
