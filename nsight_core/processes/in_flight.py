"""The call in flight, kept in a file of the job, for when the judge itself is killed.

The job's memory limit is on its processes together, so passing it kills the judge with its
contestant: the judge then names nothing, and the answer said "out of memory" without the
candidate whose call did it. So before each call the judge overwrites one small file in the
job's directory with that call (one write of a few bytes: nothing measurable beside a round
trip), and the pipeline reads it when the judge's own process was ended by a limit.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from nsight_core.errors import ErrorClass
from nsight_core.processes.sandbox import SandboxOutcome
from nsight_core.protocol import FailureEvent

IN_FLIGHT_FILE = "in_flight.json"
_WIDTH = 4096
"""Bytes written each time (padded), so a shorter record leaves nothing of a longer one."""


class InFlight:
    """The judge's side: `mark` before each call."""

    def __init__(self, job_dir: Path) -> None:
        self._fd = -1
        with contextlib.suppress(OSError):
            self._fd = os.open(job_dir / IN_FLIGHT_FILE, os.O_WRONLY | os.O_CREAT, 0o600)

    def mark(self, annotation: str, config_id: int | None, run: int | None) -> None:
        if self._fd < 0:
            return
        doc = {"annotation": annotation, "config_id": config_id, "run": run}
        line = json.dumps(doc).encode()[:_WIDTH]
        with contextlib.suppress(OSError):
            os.pwrite(self._fd, line.ljust(_WIDTH), 0)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def killed_in_flight(job_dir: Path, outcome: SandboxOutcome) -> FailureEvent | None:
    """The call the judge had in flight when a limit (memory, time) killed it, as a failure
    of its candidate; None for another end, or when no call was in flight."""
    if outcome.error_class not in (ErrorClass.OUT_OF_MEMORY, ErrorClass.TIMEOUT):
        return None
    try:
        doc = json.loads((job_dir / IN_FLIGHT_FILE).read_bytes().rstrip())
        annotation = str(doc["annotation"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    first = outcome.message.splitlines()[0] if outcome.message else ""
    run = doc.get("run")
    return FailureEvent(
        annotation=annotation,
        config_id=doc.get("config_id"),
        run=run,
        phase="profile" if run is not None else "check",
        error_class=outcome.error_class,
        message=f"the job's processes were killed during this call: {first}",
        hint=outcome.hint,
    )
