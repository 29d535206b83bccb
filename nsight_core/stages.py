"""Staged evaluation: screen every candidate with a fast timer, then profile the best under ncu.

A request with `stages` runs two jobs through `pipeline.run_profile_job` (which stays the
single-stage path):

1. **screen** (also the check): one job under the screen backend (cupti, or events where
   cupti cannot run here) over the reference and every candidate. The judge checks every
   call, so a candidate that fails here is out.
2. **profile**: one job under the request's `backend` (ncu) with its `metrics`, over the
   reference and the `top_k` fastest passing candidates.

Before the screen, the request is priced both ways (`staging.cost`): where a screen cannot
pay for itself (few candidates, few replay passes), it is skipped and every candidate is
profiled in one job, and the screen stage says why with the numbers. After the profile
stage, a kept candidate whose screen the profile stage contradicts beyond the noise is
doubted and the next-ranked one profiled in its place (`staging.replace`).

This module runs them; `staging/` holds the parts: the two stages' requests (`requests`),
the ranking after the screen (`ranking`), the budget and the ETA of a later stage
(`budget`), the price of each way (`cost`), the replacements (`replace`), what every job is
started with (`context`), and the one result made of both (`merge`).

Cross-check (`crosscheck.cross_check`, after the profile stage): the profile stage's time
rows and comparisons get the screen's measurement of the same annotation and config
(`CrossCheck`), and disagreement beyond stated bounds is flagged in `Reasons` and counted
in the message (docs/stages.md). The ranking is not redone.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from pathlib import Path

from nsight_core.collectors import get_backend
from nsight_core.errors import NsightCoreError
from nsight_core.pipeline import run_profile_job
from nsight_core.plan.admit import Admitted
from nsight_core.plan.config import EngineConfig
from nsight_core.plan.request_defaults import resolve_defaults
from nsight_core.request import ProfileRequest
from nsight_core.results import ProfileResult, StageReport, iso, utc_now
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
from nsight_core.staging.context import StageCallback, StagedRun, StageUpdate
from nsight_core.staging.cost import H200_COSTS, StageCosts, StagingEstimate, estimate_staging
from nsight_core.staging.merge import join, merged, partial_result
from nsight_core.staging.ranking import rank_candidates
from nsight_core.staging.replace import replace_overrated
from nsight_core.staging.requests import (
    final_backend_of,
    preflight_request,
    profile_request,
    screen_request,
)
from nsight_core.standby.pool import StandbyPool

__all__ = [
    "H200_COSTS",
    "SCREEN_DIR",
    "StageCallback",
    "StageCosts",
    "StageEta",
    "StageUpdate",
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


# -- running -------------------------------------------------------------------------------


def run_job(
    request: ProfileRequest | Admitted,
    job_dir: Path,
    *,
    result_id: str,
    on_progress: ProgressCallback | None = None,
    on_stage: StageCallback | None = None,
    cancel: threading.Event | None = None,
    gpu: str | None = None,
    standby: StandbyPool | None = None,
    config: EngineConfig,
) -> ProfileResult:
    """One request, staged or not: what the job queue and cluster workers call. An
    `Admitted` request (the server's, checked before it was queued) is not checked again;
    a bare one is admitted here."""
    stages = (request.request if isinstance(request, Admitted) else request).stages
    run: Callable[..., ProfileResult] = (
        run_profile_job if stages is None else functools.partial(run_staged, on_stage=on_stage)
    )
    return run(
        request,
        job_dir,
        result_id=result_id,
        on_progress=on_progress,
        cancel=cancel,
        gpu=gpu,
        standby=standby,
        config=config,
    )


def run_staged(
    request: ProfileRequest | Admitted,
    job_dir: Path,
    *,
    result_id: str,
    on_progress: ProgressCallback | None = None,
    on_stage: StageCallback | None = None,
    cancel: threading.Event | None = None,
    gpu: str | None = None,
    clock: Callable[[], float] = time.monotonic,
    standby: StandbyPool | None = None,
    config: EngineConfig,
    costs: StageCosts | None = None,
    force_screen: bool = False,
) -> ProfileResult:
    """Screen every candidate, then profile the best `top_k`; never raises for job failures.

    `config.profile_backend` replaces the request's backend for the profile stage (default:
    the request's, ncu); tests on hosts without ncu set 'events'. `costs` prices the stages
    to decide whether the screen can pay (`staging.cost`); by default the H200's, and none
    (the screen always runs) under a stand-in profile backend, which is not the ncu they
    price.
    `force_screen` screens whatever the estimate says (benchmarks that measure the screen).
    """
    created = iso(utc_now())
    try:
        admitted = (
            request
            if isinstance(request, Admitted)
            else preflight_request(resolve_defaults(request, config), config=config)
        )
    except NsightCoreError as err:
        return refused(err, result_id=result_id, created_at=created)
    request = admitted.request
    assert request.stages is not None and admitted.screen is not None, "needs stages"
    screen_backend, fallback_note = admitted.screen, admitted.screen_note
    final_backend = config.profile_backend
    run = StagedRun(
        request=request,
        job_dir=Path(job_dir),
        result_id=result_id,
        created=created,
        final=final_backend_of(request, final_backend),
        budget=Budget(request, clock(), clock),
        on_progress=on_progress,
        on_stage=on_stage,
        cancel=cancel,
        gpu=gpu,
        standby=standby,
        config=config,
    )
    if costs is None and final_backend is None:
        costs = H200_COSTS
    estimate = estimate_staging(request, costs, config) if costs is not None else None
    if estimate is not None and not estimate.pays and not force_screen:
        return _unscreened(run, screen_backend, estimate, clock)
    notes = [estimate.explain()] if estimate is not None else []
    screen_report = StageReport(
        Stage="screen",
        Backend=screen_backend,
        Status="running",
        Annotations=request.annotations,
        Reason=fallback_note,
    )
    profile_report = StageReport(Stage="profile", Backend=run.final, Status="pending")

    # -- stage 1: check + screen -------------------------------------------------------
    limit = run.budget.limit()
    screen_report = screen_report.model_copy(update={"TimeLimitS": round(limit, 3)})
    calls = run.timed_calls(len(request.annotations))
    partial = partial_result(result_id, created, [screen_report, profile_report], None)
    run.started(StageUpdate("screen", 0, 2, screen_backend, calls, partial))
    t_screen = clock()
    screen = run.job(
        screen_request(request, screen_backend, limit), run.job_dir / SCREEN_DIR, "screen"
    )
    screen_wall = clock() - t_screen
    screen_status = stage_status(screen, run.budget.bound(limit))
    metric = get_backend(screen_backend).default_metric
    ranking = rank_candidates(screen, request, metric, request.stages.top_k)
    kept = [r.Annotation for r in ranking if r.Kept]
    screen_report = screen_report.model_copy(
        update={
            "Status": screen_status,
            "WallSeconds": round(screen_wall, 3),
            "Reason": join(
                fallback_note,
                cut_reason(request, limit) if screen_status == "cut" else None,
                screen.message if screen_status == "failed" else None,
            ),
            "Ranking": ranking,
        }
    )
    eta = eta_of(screen, metric, screen_wall)

    # -- stage 2: profile the top k under the final backend ------------------------------
    skip = profile_skip_reason(request, screen_status, kept, run.budget, eta, cancel)
    final_result: ProfileResult | None = None
    flags: list[str] = []
    if skip is not None:
        profile_report = profile_report.model_copy(update={"Status": "skipped", "Reason": skip})
    else:
        limit = run.budget.limit()
        annotations = [request.reference, *kept]
        profile_report = profile_report.model_copy(
            update={"Status": "running", "Annotations": annotations, "TimeLimitS": round(limit, 3)}
        )
        partial = partial_result(result_id, created, [screen_report, profile_report], screen)
        run.started(
            StageUpdate("profile", 1, 2, run.final, run.timed_calls(len(annotations)), partial, eta)
        )
        t_profile = clock()
        final_result = run.job(
            profile_request(request, run.final, kept, limit), run.job_dir, "profile"
        )
        status = stage_status(final_result, run.budget.bound(limit))
        checked = cross_check(
            screen,
            final_result,
            screen_metric=metric,
            final_metric=get_backend(run.final).default_metric,
        )
        screen, final_result, flags = checked.screen, checked.final, checked.flags
        profile_report = profile_report.model_copy(
            update={
                "Status": status,
                "Reason": cut_reason(request, limit)
                if status == "cut"
                else (final_result.message if status == "failed" else None),
            }
        )
        if status == "done" and checked.overrated:
            replaced = replace_overrated(
                run,
                screen,
                final_result,
                screen_report,
                profile_report,
                checked.overrated,
                metric,
                eta,
            )
            screen, final_result, screen_report, profile_report = replaced.parts
            flags += replaced.flags
        profile_report = profile_report.model_copy(
            update={"WallSeconds": round(clock() - t_profile, 3)}
        )
    return merged(
        request,
        result_id,
        created,
        screen,
        final_result,
        [screen_report, profile_report],
        wall_s=clock() - run.budget.t0,
        flags=flags,
        notes=notes,
    )


def _unscreened(
    run: StagedRun, screen_backend: str, estimate: StagingEstimate, clock: Callable[[], float]
) -> ProfileResult:
    """The request when the screen cannot pay: one job over every candidate, as unstaged.

    Its ETA comes from the same estimate: ncu's start, then its pace per timed call.
    """
    request = run.request
    screen_report = StageReport(
        Stage="screen", Backend=screen_backend, Status="skipped", Reason=estimate.explain()
    )
    limit = run.budget.limit()
    profile_report = StageReport(
        Stage="profile",
        Backend=run.final,
        Status="running",
        Annotations=request.annotations,
        TimeLimitS=round(limit, 3),
    )
    calls = run.timed_calls(len(request.annotations))
    eta = StageEta(
        fixed_s=estimate.ncu_start_s,
        per_call_s=(estimate.all_ncu_s - estimate.ncu_start_s) / max(calls, 1),
    )
    partial = partial_result(run.result_id, run.created, [screen_report, profile_report], None)
    run.started(StageUpdate("profile", 1, 2, run.final, calls, partial, eta))
    t0 = clock()
    final = run.job(
        profile_request(request, run.final, request.candidates, limit), run.job_dir, "profile"
    )
    status = stage_status(final, run.budget.bound(limit))
    profile_report = profile_report.model_copy(
        update={
            "Status": status,
            "WallSeconds": round(clock() - t0, 3),
            "Reason": cut_reason(request, limit)
            if status == "cut"
            else (final.message if status == "failed" else None),
        }
    )
    return merged(
        request,
        run.result_id,
        run.created,
        None,
        final,
        [screen_report, profile_report],
        wall_s=clock() - run.budget.t0,
        notes=[estimate.explain()],
    )
