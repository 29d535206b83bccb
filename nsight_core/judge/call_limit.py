"""How long one candidate call may take before the judge gives up on it.

A job's own limit (`time_limit_s`, 600 s by default) is the wrong clock for a hang: a
candidate that never returns would hold the job, and every other candidate in it, until
that limit, and report only then. So each candidate call has a limit of its own, from what
this job has seen: the reference's slowest call so far times `CALL_FACTOR`, never under
`CALL_FLOOR_S` (a candidate's first call may compile or autotune: Triton's autotuner takes
tens of seconds), and never over half of the job's time left, so that the candidates after
a hang still fit in the job's limit (the pipeline runs them again without the one that hung:
pipeline.py). The reference is trusted and has only the job's limit.
"""

from __future__ import annotations

import dataclasses
import time

from nsight_core.errors import ErrorClass
from nsight_core.processes.sandbox import Deadline, SandboxOutcome
from nsight_core.protocol import FailureEvent

CALL_FLOOR_S = 30.0
"""The least a candidate call is given, whatever the reference took."""
CALL_FACTOR = 50.0
"""A candidate call may take this many times the reference's slowest call."""


class CallLimit:
    """The per-call limit of one job's candidate calls."""

    def __init__(self, job_deadline: Deadline, *, floor_s: float = CALL_FLOOR_S) -> None:
        self._job = job_deadline
        self._floor_s = floor_s
        self.reference_slowest_s = 0.0

    def note_reference(self, seconds: float) -> None:
        self.reference_slowest_s = max(self.reference_slowest_s, seconds)

    def for_candidate(self) -> tuple[float, str]:
        """(seconds from now, how they were chosen, as a message says it)."""
        own = max(self._floor_s, CALL_FACTOR * self.reference_slowest_s)
        half_left = max(0.0, self._job.at - time.monotonic()) / 2
        if half_left < own:
            return half_left, (
                f"half of the {2 * half_left:.1f} s the job had left, so that the other "
                "candidates still fit in its time_limit_s"
            )
        if own > self._floor_s:
            return own, (
                f"{CALL_FACTOR:g} times the reference's slowest call "
                f"({self.reference_slowest_s:.3g} s)"
            )
        return own, f"the {self._floor_s:g} s floor every candidate call is given"


def lost_call(failure: FailureEvent, outcome: SandboxOutcome | None) -> FailureEvent:
    """The call in flight when the contestant died, classed by how its process ended: its
    time limit (timeout), its memory limit (out_of_memory), a kill or crash (crashed)."""
    if outcome is None or outcome.error_class is None:
        return failure
    cls = outcome.error_class
    if cls not in (ErrorClass.TIMEOUT, ErrorClass.OUT_OF_MEMORY, ErrorClass.CANCELLED):
        cls = ErrorClass.CRASHED
    first = outcome.message.splitlines()[0] if outcome.message else failure.message
    why = {
        ErrorClass.TIMEOUT: "the job's time limit (time_limit_s) ended its process during "
        f"this call: {first}",
        ErrorClass.OUT_OF_MEMORY: f"its process was killed during this call: {first}",
    }.get(cls, f"its process ended during this call ({failure.message}): {first}")
    return failure.model_copy(
        update={"error_class": cls, "message": why, "hint": outcome.hint or failure.hint}
    )


def ended_by_judge(outcome: SandboxOutcome) -> SandboxOutcome:
    """The contestant's outcome once the judge ended it for a hung call: not the job's error."""
    return dataclasses.replace(
        outcome,
        error_class=None,
        cancelled=False,
        message="the judge ended the contestant: a candidate's call outlived its limit "
        "(that candidate's failure says which and why)",
        hint="",
    )
