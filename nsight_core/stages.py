"""Staged evaluation: screen every candidate with a fast timer, then profile the best under ncu.

A request with `stages` runs two jobs through `pipeline.run_profile_job` (which stays the
single-stage path):

1. **screen** (also the check): one job under the screen backend (cupti, or events where
   cupti cannot run here) over the reference and every candidate. The judge checks every
   call, so a candidate that fails here is out.
2. **profile**: one job under the request's `backend` (ncu) with its `metrics`, over the
   reference and the `top_k` fastest passing candidates.

This module runs them; `staging/` holds the parts: the two stages' requests (`requests`),
the ranking after the screen (`ranking`), the budget and the ETA of a later stage
(`budget`), and the one result made of both (`merge`).

Cross-check (`crosscheck.cross_check`, after the profile stage): the profile stage's time
rows and comparisons get the screen's measurement of the same annotation and config
(`CrossCheck`), and disagreement beyond stated bounds is flagged in `Reasons` and counted
in the message (docs/stages.md). The ranking is not redone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nsight_core.collectors import get_backend
from nsight_core.errors import NsightCoreError
from nsight_core.pipeline import run_profile_job
from nsight_core.plan.config import EngineConfig
from nsight_core.processes.standby import StandbyPool
from nsight_core.request import ProfileRequest
from nsight_core.results import ProfileResult, StageName, StageReport, iso, utc_now
from nsight_core.rows.assemble import refused
from nsight_core.rows.crosscheck import cross_check
from nsight_core.rows.runs import ProgressCallback
from nsight_core.staging.budget import (
    Budget,
    StageEta,
    cut_reason,
    eta_of,
    profile_skip_reason,
    stage_status,
)
from nsight_core.staging.merge import join, merged, partial_result, tagged
from nsight_core.staging.ranking import rank_candidates
from nsight_core.staging.requests import (
    choose_screen,
    final_backend_of,
    preflight_request,
    profile_request,
    screen_request,
)

__all__ = [
    "SCREEN_DIR",
    "StageCallback",
    "StageEta",
    "StageUpdate",
    "choose_screen",
    "preflight_request",
    "profile_request",
    "rank_candidates",
    "run_job",
    "run_staged",
    "screen_request",
]

SCREEN_DIR = "screen"
"""The screen stage's job directory inside the result's; the profile stage uses the result's
own directory, so its report and logs sit where single-stage jobs keep theirs."""


@dataclass(frozen=True)
class StageUpdate:
    """The stage runner's report to its caller when a stage starts (engine thread)."""

    stage: StageName
    index: int
    """0-based position of the stage; `count` stages in all."""
    count: int
    backend: str
    calls: int
    """Timed calls the stage makes (annotations x configs x runs)."""
    partial: ProfileResult
    """The finished stages' rows, comparisons and checks, and every stage's state."""
    eta: StageEta | None = None


StageCallback = Callable[[StageUpdate], None]


# -- running -------------------------------------------------------------------------------


def run_job(
    request: ProfileRequest,
    job_dir: Path,
    *,
    result_id: str,
    on_progress: ProgressCallback | None = None,
    on_stage: StageCallback | None = None,
    cancel: threading.Event | None = None,
    gpu: str | None = None,
    final_backend: str | None = None,
    standby: StandbyPool | None = None,
    config: EngineConfig | None = None,
) -> ProfileResult:
    """One request, staged or not: what the job queue and cluster workers call."""
    if request.stages is None:
        return run_profile_job(
            request,
            job_dir,
            result_id=result_id,
            on_progress=on_progress,
            cancel=cancel,
            gpu=gpu,
            standby=standby,
            config=config,
        )
    return run_staged(
        request,
        job_dir,
        result_id=result_id,
        on_progress=on_progress,
        on_stage=on_stage,
        cancel=cancel,
        gpu=gpu,
        final_backend=final_backend,
        standby=standby,
        config=config,
    )


def run_staged(
    request: ProfileRequest,
    job_dir: Path,
    *,
    result_id: str,
    on_progress: ProgressCallback | None = None,
    on_stage: StageCallback | None = None,
    cancel: threading.Event | None = None,
    gpu: str | None = None,
    final_backend: str | None = None,
    clock: Callable[[], float] = time.monotonic,
    standby: StandbyPool | None = None,
    config: EngineConfig | None = None,
) -> ProfileResult:
    """Screen every candidate, then profile the best `top_k`; never raises for job failures.

    `final_backend` replaces the request's backend for the profile stage (default: the
    request's, ncu); tests on hosts without ncu pass 'events'.
    """
    assert request.stages is not None, "run_staged needs a request with stages"
    top_k = request.stages.top_k
    created = iso(utc_now())
    budget = Budget(request, clock(), clock)
    final = final_backend_of(request, final_backend)
    try:
        preflight_request(request, final_backend=final_backend)
        screen_backend, fallback_note = choose_screen(request)
    except NsightCoreError as err:
        return refused(err, result_id=result_id, created_at=created)
    screen_report = StageReport(
        Stage="screen",
        Backend=screen_backend,
        Status="running",
        Annotations=request.annotations,
        Reason=fallback_note,
    )
    profile_report = StageReport(Stage="profile", Backend=final, Status="pending")

    # -- stage 1: check + screen -------------------------------------------------------
    limit = budget.limit()
    screen_report = screen_report.model_copy(update={"TimeLimitS": round(limit, 3)})
    calls = len(request.annotations) * len(request.configs) * request.runs
    if on_stage is not None:
        partial = partial_result(result_id, created, [screen_report, profile_report], None)
        on_stage(StageUpdate("screen", 0, 2, screen_backend, calls, partial))
    t_screen = clock()
    screen = run_profile_job(
        screen_request(request, screen_backend, limit),
        Path(job_dir) / SCREEN_DIR,
        result_id=result_id,
        on_progress=on_progress,
        cancel=cancel,
        gpu=gpu,
        standby=standby,
        config=config,
    )
    screen_wall = clock() - t_screen
    screen = tagged(screen, "screen")
    screen_status = stage_status(screen, budget.bound(limit))
    metric = get_backend(screen_backend).default_metric
    ranking = rank_candidates(screen, request, metric, top_k)
    kept = [r.Annotation for r in ranking if r.Kept]
    screen_reason = join(
        fallback_note,
        cut_reason(request, limit) if screen_status == "cut" else None,
        screen.message if screen_status == "failed" else None,
    )
    screen_report = screen_report.model_copy(
        update={
            "Status": screen_status,
            "WallSeconds": round(screen_wall, 3),
            "Reason": screen_reason,
            "Ranking": ranking,
        }
    )
    eta = eta_of(screen, metric, screen_wall)

    # -- stage 2: profile the top k under the final backend ------------------------------
    skip = profile_skip_reason(request, screen_status, kept, budget, eta, cancel)
    final_result: ProfileResult | None = None
    flags: list[str] = []
    if skip is not None:
        profile_report = profile_report.model_copy(update={"Status": "skipped", "Reason": skip})
    else:
        limit = budget.limit()
        annotations = [request.reference, *kept]
        profile_report = profile_report.model_copy(
            update={"Status": "running", "Annotations": annotations, "TimeLimitS": round(limit, 3)}
        )
        if on_stage is not None:
            partial = partial_result(result_id, created, [screen_report, profile_report], screen)
            calls = len(annotations) * len(request.configs) * request.runs
            on_stage(StageUpdate("profile", 1, 2, final, calls, partial, eta))
        t_profile = clock()
        final_result = run_profile_job(
            profile_request(request, final, kept, limit),
            Path(job_dir),
            result_id=result_id,
            on_progress=on_progress,
            cancel=cancel,
            gpu=gpu,
            standby=standby,
            config=config,
        )
        final_result = tagged(final_result, "profile")
        status = stage_status(final_result, budget.bound(limit))
        checked = cross_check(
            screen,
            final_result,
            screen_metric=metric,
            final_metric=get_backend(final).default_metric,
        )
        screen, final_result, flags = checked.screen, checked.final, checked.flags
        profile_report = profile_report.model_copy(
            update={
                "Status": status,
                "WallSeconds": round(clock() - t_profile, 3),
                "Reason": cut_reason(request, limit)
                if status == "cut"
                else (final_result.message if status == "failed" else None),
            }
        )
    return merged(
        request,
        result_id,
        created,
        screen,
        final_result,
        [screen_report, profile_report],
        wall_s=clock() - budget.t0,
        flags=flags,
    )
