"""What is left of `budget_s`, how a stage ended under it, and the ETA of a later stage.

Each stage runs with min(time_limit_s, what is left of the budget) as its time limit. A
stage is skipped when what is left is below the screen's measured cost up to its first
timed call (it could not time a single call); a stage stopped by the budget is 'cut' and
its rows so far are kept.

ETA of a later stage (`StageEta`): the screen's measured cost before its first timed call
plus its measured seconds per timed call times the calls left. It is a floor under ncu,
which replays each kernel once per pass.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from nsight_core.errors import ErrorClass
from nsight_core.request import ProfileRequest
from nsight_core.results import ProfileResult, StageStatus


@dataclass(frozen=True)
class StageEta:
    """What the screen measured, to estimate how long a later stage takes.

    `fixed_s`: the screen's seconds before and after timing (process start, imports,
    check); `per_call_s`: its seconds per timed call. Under ncu both are floors.
    """

    fixed_s: float
    per_call_s: float

    def eta_s(self, elapsed_s: float, calls_left: int) -> float:
        """Seconds left: the fixed cost not yet spent, plus the calls left at the screen's pace."""
        return max(0.0, self.fixed_s - elapsed_s) + self.per_call_s * max(0, calls_left)


@dataclass
class Budget:
    """What is left of budget_s, and each stage's time limit under it."""

    request: ProfileRequest
    t0: float
    clock: Callable[[], float]

    def left(self) -> float | None:
        if self.request.budget_s is None:
            return None
        return self.request.budget_s - (self.clock() - self.t0)

    def limit(self) -> float:
        left = self.left()
        return self.request.time_limit_s if left is None else min(self.request.time_limit_s, left)

    def bound(self, limit: float) -> bool:
        """The budget, not time_limit_s, set this limit."""
        return limit < self.request.time_limit_s


def stage_status(result: ProfileResult, budget_bound: bool) -> StageStatus:
    if result.status == "cancelled":
        return "cancelled"
    timed_out = result.error is not None and result.error.ErrorClass is ErrorClass.TIMEOUT
    if timed_out and budget_bound:
        return "cut"
    if result.status == "failed":
        return "failed"
    return "done"


def cut_reason(request: ProfileRequest, limit: float) -> str:
    return (
        f"budget_s={request.budget_s:g} was spent: the stage got the {limit:.1f} s left and was "
        "stopped; its rows of calls finished before are kept"
    )


def no_time_reason(
    request: ProfileRequest, budget: Budget, eta: StageEta | None, what: str
) -> str | None:
    """Why a job after the screen cannot start in what is left of the budget, or None."""
    left = budget.left()
    if left is None:
        return None
    start_s = eta.fixed_s if eta is not None else 0.0
    if left <= max(start_s, 0.0):
        return (
            f"budget_s={request.budget_s:g}: {max(left, 0.0):.1f} s were left, less than the "
            f"{start_s:.1f} s the screen needed before its first timed call, so {what} "
            "could not time a single call; raise budget_s to profile the top candidates"
        )
    return None


def profile_skip_reason(
    request: ProfileRequest,
    screen_status: StageStatus,
    kept: list[str],
    budget: Budget,
    eta: StageEta | None,
    cancel: threading.Event | None,
) -> str | None:
    """Why the profile stage does not start after the screen, or None when it does."""
    if screen_status == "cancelled" or (cancel is not None and cancel.is_set()):
        return "the job was cancelled during the screen"
    if screen_status == "cut":
        return f"budget_s={request.budget_s:g} was spent during the screen"
    if not kept:
        return "no candidate passed the screen (see the screen stage's Ranking for why)"
    return no_time_reason(request, budget, eta, "the profile stage")


def eta_of(screen: ProfileResult, metric: str, wall_s: float) -> StageEta | None:
    """The screen's fixed cost and seconds per timed call, from its own measurements."""
    calls = sum(r.NumRuns for r in screen.rows if r.Metric == metric)
    if calls <= 0:
        return None
    phases = screen.provenance.phase_seconds if screen.provenance is not None else {}
    timed_s = phases.get("profile")
    if timed_s is None or timed_s > wall_s:
        return StageEta(fixed_s=0.0, per_call_s=wall_s / calls)
    return StageEta(fixed_s=wall_s - timed_s, per_call_s=timed_s / calls)
