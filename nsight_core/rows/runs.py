"""A finished job process, as the parent sees it: how it ended and what it reported.

Everything the judge (or the `@kernel` contestant) writes to events.jsonl is parsed strictly
here: an unparsable line is counted and reported, never silently dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter, ValidationError

from nsight_core.collectors.base import Wrapped
from nsight_core.errors import NsightCoreError
from nsight_core.host.contention import HostLoad
from nsight_core.protocol import (
    CheckEvent,
    DoneEvent,
    EndEvent,
    FailureEvent,
    FloorEvent,
    GpuStateEvent,
    JobEvent,
    ProgressEvent,
    RangeEvent,
    SampleEvent,
    SuspectEvent,
)
from nsight_core.settings import JobSettings

if TYPE_CHECKING:  # only for annotations
    from nsight_core.processes.sandbox import SandboxOutcome

log = logging.getLogger(__name__)

ProgressCallback = Callable[[ProgressEvent], None]

_EVENT = TypeAdapter[JobEvent](JobEvent)


@dataclass
class JobEvents:
    """Everything the job's processes reported, parsed and checked."""

    checks: list[CheckEvent] = field(default_factory=list)
    failures: list[FailureEvent] = field(default_factory=list)
    ranges: list[RangeEvent] = field(default_factory=list)
    samples: list[SampleEvent] = field(default_factory=list)
    suspects: list[SuspectEvent] = field(default_factory=list)
    floors: list[FloorEvent] = field(default_factory=list)
    gpu_states: list[GpuStateEvent] = field(default_factory=list)
    end: EndEvent | None = None
    done: DoneEvent | None = None
    bad_lines: int = 0


def read_events(path: Path) -> JobEvents:
    out = JobEvents()
    if not path.exists():
        return out
    kept: dict[type[JobEvent], list[Any]] = {
        CheckEvent: out.checks,
        FailureEvent: out.failures,
        RangeEvent: out.ranges,
        SampleEvent: out.samples,
        SuspectEvent: out.suspects,
        FloorEvent: out.floors,
        GpuStateEvent: out.gpu_states,
    }
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            ev = _EVENT.validate_json(line)
        except ValidationError:
            out.bad_lines += 1
            continue
        if isinstance(ev, EndEvent):
            out.end = ev
        elif isinstance(ev, DoneEvent):
            out.done = ev
        elif type(ev) in kept:  # progress and phases are no part of the result
            kept[type(ev)].append(ev)
    return out


class EventTail:
    """Reads new complete lines of events.jsonl while the job runs, for progress."""

    def __init__(self, path: Path, on_progress: ProgressCallback | None) -> None:
        self.path = path
        self.on_progress = on_progress
        self._offset = 0
        self._buf = ""

    def poll(self) -> None:
        if self.on_progress is None or not self.path.exists():
            return
        with self.path.open("r", encoding="utf-8", errors="replace") as fh:
            fh.seek(self._offset)
            chunk = fh.read()
            self._offset = fh.tell()
        self._buf += chunk
        *lines, self._buf = self._buf.split("\n")
        for line in lines:
            if '"type":"progress"' not in line.replace(" ", ""):
                continue
            try:
                ev = _EVENT.validate_json(line)
            except ValidationError:
                continue
            if isinstance(ev, ProgressEvent):
                try:
                    self.on_progress(ev)
                except Exception:  # a progress sink must never break the job
                    log.exception("progress callback failed")


@dataclass
class JobRun:
    """A finished job: how its process ended, what it said, where its files are."""

    job_dir: Path
    settings: JobSettings
    """The job's settings as its plan resolved them: row building reads these."""
    wrapped: Wrapped
    """The measured command (the contestant's, under ncu or not) and the backend's files."""
    outcome: SandboxOutcome
    """How the process the pipeline started (the judge, or the `@kernel` contestant) ended."""
    events: JobEvents
    error: NsightCoreError | None
    wall_s: float
    artifacts: dict[str, str]
    host: tuple[HostLoad, HostLoad] | None = None
    """The host's load before and after the job (host/contention.py); None where not read."""
