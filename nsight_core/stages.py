"""Staged evaluation: screen every candidate with a fast timer, then profile the best under ncu.

A request with `stages` runs two jobs through `pipeline.run_profile_job` (which stays the
single-stage path):

1. **screen** (also the check): one job under the screen backend (cupti, or events where
   cupti cannot run here) over the reference and every candidate. The judge checks every
   call, so a candidate that fails here is out.
2. **profile**: one job under the request's `backend` (ncu) with its `metrics`, over the
   reference and the `top_k` fastest passing candidates.

Ranking (`rank_candidates`): a candidate is ranked only if it passed the check on every
config and the screen gave it a speedup against the reference on every config; its score is
the geometric mean of those speedups (reference time / candidate time: lowest time wins).
Candidates with a suspicious screen row come after every clean one (an in-process timer is
what a cheating candidate would tamper with; ncu, outside the process, settles it if one
is kept). Equal scores keep the request's order. Failed, unchecked and unmeasured (NaN)
candidates are never kept, and `ScreenRank.Why` says why.

Budget (`budget_s`): each stage runs with min(time_limit_s, what is left of the budget) as
its time limit. A stage is skipped when what is left is below the screen's measured cost up
to its first timed call (it could not time a single call); a stage stopped by the budget is
'cut' and its rows so far are kept. The result's `stages` says what ran, was cut or skipped.

Cross-check (`crosscheck.cross_check`, after the profile stage): the profile stage's time
rows and comparisons get the screen's measurement of the same annotation and config
(`CrossCheck`), and disagreement beyond stated bounds is flagged in `Reasons` and counted
in the message (docs/stages.md). The ranking is not redone.

ETA of a later stage (`StageEta`): the screen's measured cost before its first timed call
plus its measured seconds per timed call times the calls left. It is a floor under ncu,
which replays each kernel once per pass.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from nsight_core.collectors import get_backend
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.pipeline import preflight, run_profile_job
from nsight_core.plan.config import EngineConfig
from nsight_core.processes.standby import StandbyPool
from nsight_core.request import KernelsSpec, ProfileRequest
from nsight_core.results import (
    JobStatus,
    ProfileResult,
    Provenance,
    ScreenRank,
    StageName,
    StageReport,
    StageStatus,
    iso,
    utc_now,
)
from nsight_core.rows.assemble import refused
from nsight_core.rows.crosscheck import cross_check
from nsight_core.rows.runs import ProgressCallback

SCREEN_DIR = "screen"
"""The screen stage's job directory inside the result's; the profile stage uses the result's
own directory, so its report and logs sit where single-stage jobs keep theirs."""


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


# -- the two stages' requests ------------------------------------------------------------


def final_backend_of(request: ProfileRequest, final_backend: str | None) -> str:
    return final_backend or request.backend


def screen_request(request: ProfileRequest, backend: str, time_limit_s: float) -> ProfileRequest:
    """The screen's job: every candidate, the screen backend's own metric, no ncu knobs."""
    return request.model_copy(
        update={
            "backend": backend,
            "metrics": [get_backend(backend).default_metric],
            "kernels": KernelsSpec(combine=request.kernels.combine, ignore=request.kernels.ignore),
            "diagnose": False,
            "stages": None,
            "budget_s": None,
            "time_limit_s": time_limit_s,
        }
    )


def profile_request(
    request: ProfileRequest, backend: str, kept: Sequence[str], time_limit_s: float
) -> ProfileRequest:
    """The profile stage's job: the reference and the kept candidates, the request's metrics."""
    return request.model_copy(
        update={
            "backend": backend,
            "candidates": list(kept),
            "stages": None,
            "budget_s": None,
            "time_limit_s": time_limit_s,
        }
    )


def choose_screen(request: ProfileRequest) -> tuple[str, str | None]:
    """The screen backend that can run here, and a note when it is not the one asked for.

    cupti needs cupti-python fitting the driver; where its preflight refuses, the screen
    falls back to events (always available) and says why.
    """
    assert request.stages is not None
    wanted = request.stages.screen
    try:
        preflight(screen_request(request, wanted, request.time_limit_s))
        return wanted, None
    except NsightCoreError as err:
        fallback = "events"
        if wanted == fallback:
            raise
        preflight(screen_request(request, fallback, request.time_limit_s))
        return (
            fallback,
            f"screen backend {wanted!r} cannot run here ({err.message}); screened with events",
        )


def preflight_request(request: ProfileRequest, *, final_backend: str | None = None) -> None:
    """Refuse a request (staged or not) that cannot work here, before it is queued.

    The profile stage must measure from outside the candidate's process (ncu), or it adds
    nothing the screen does not give. `final_backend` replaces the request's backend for
    the profile stage (tests on hosts without ncu); it is trusted as given.
    """
    if request.stages is None:
        preflight(request)
        return
    if final_backend is None and get_backend(request.backend).evidence != "external":
        raise NsightCoreError(
            ErrorClass.INVALID_REQUEST,
            f"stages: the profile stage runs under backend {request.backend!r}, which times "
            "inside the candidate's process like the screen, so it would add nothing",
            "set backend to 'ncu' (the default) with stages, or drop stages and use "
            f"backend {request.backend!r} alone",
        )
    final = final_backend_of(request, final_backend)
    preflight(profile_request(request, final, request.candidates, request.time_limit_s))
    choose_screen(request)


# -- ranking -------------------------------------------------------------------------------


def rank_candidates(
    result: ProfileResult, request: ProfileRequest, metric: str, top_k: int
) -> list[ScreenRank]:
    """Every candidate's place after the screen (see the module docstring for the rules)."""
    configs = range(len(request.configs))
    scored: list[tuple[bool, float, int, str, str]] = []
    out: dict[str, ScreenRank] = {}
    for order, cand in enumerate(request.candidates):
        why = _not_rankable(result, cand, metric, configs)
        if why is not None:
            out[cand] = ScreenRank(Annotation=cand, Rank=None, Speedup=None, Kept=False, Why=why)
            continue
        speedups = [
            c.Speedup
            for c in result.comparisons
            if c.Annotation == cand and c.Metric == metric and c.Speedup is not None
        ]
        score = math.exp(sum(math.log(s) for s in speedups) / len(speedups))
        reasons = [
            reason
            for r in result.rows
            if r.Annotation == cand and r.Metric == metric and r.Trust == "suspicious"
            for reason in r.Reasons
        ]
        scored.append((bool(reasons), score, order, cand, _brief(reasons)))
    scored.sort(key=lambda s: (s[0], -s[1], s[2]))
    clean = sum(1 for s in scored if not s[0])
    for rank, (suspicious, score, _, cand, doubt) in enumerate(scored, start=1):
        kept = rank <= top_k
        pace = f"{score:.3g}x the reference's speed in the screen"
        if kept and suspicious:
            why = (
                f"rank {rank}: {pace}; kept although its screen row is suspicious "
                f"({doubt}) because only {clean} clean candidate(s) passed; the profile "
                "stage measures it outside its process"
            )
        elif kept:
            why = f"rank {rank} of {len(scored)}: {pace}"
        elif suspicious:
            why = (
                f"rank {rank}: {pace}, but its screen row is suspicious ({doubt}), so "
                f"it ranks after the clean candidates, outside top_k={top_k}"
            )
        else:
            why = f"rank {rank}: {pace}, outside top_k={top_k}"
        out[cand] = ScreenRank(
            Annotation=cand,
            Rank=rank,
            Speedup=score,
            Suspicious=suspicious,
            Kept=kept,
            Why=why,
        )
    ranked = sorted(
        out.values(),
        key=lambda r: (r.Rank is None, r.Rank or 0, request.candidates.index(r.Annotation)),
    )
    return ranked


def _brief(reasons: list[str], limit: int = 300) -> str:
    """A candidate's suspicion reasons, deduplicated, cut to `limit` characters."""
    text = " / ".join(dict.fromkeys(reasons))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _not_rankable(result: ProfileResult, cand: str, metric: str, configs: range) -> str | None:
    """Why a candidate cannot be ranked (failed, unchecked, unmeasured), or None."""
    failed = [f for f in result.failures if f.Annotation == cand]
    if failed:
        return f"failed in the screen: {failed[0].ErrorClass}: {failed[0].Error}"
    wrong = [c for c in result.correctness if c.Annotation == cand and not c.Passed]
    if wrong:
        first = wrong[0]
        what = first.Error or "; ".join(first.Reasons) or "output differs from the reference"
        return f"failed the check on config {first.ConfigId}: {first.ErrorClass or 'incorrect'}: {what}"
    checked = {c.ConfigId for c in result.correctness if c.Annotation == cand and c.Passed}
    missing_check = [i for i in configs if i not in checked]
    if missing_check and any(c.Annotation == cand for c in result.correctness):
        return f"not checked on config(s) {missing_check}: the screen ended before"
    measured = {
        c.ConfigId
        for c in result.comparisons
        if c.Annotation == cand
        and c.Metric == metric
        and c.Speedup is not None
        and math.isfinite(c.Speedup)
        and c.Speedup > 0
    }
    missing = [i for i in configs if i not in measured]
    if missing:
        return (
            f"no screen speedup on config(s) {missing} (not timed, or its runs or the "
            "reference's gave no value): not ranked"
        )
    return None


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


@dataclass
class _Budget:
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
    budget = _Budget(request, clock(), clock)
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
        partial = _partial(result_id, created, [screen_report, profile_report], None)
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
    screen = _tagged(screen, "screen")
    screen_status = _stage_status(screen, budget.bound(limit))
    metric = get_backend(screen_backend).default_metric
    ranking = rank_candidates(screen, request, metric, top_k)
    kept = [r.Annotation for r in ranking if r.Kept]
    screen_reason = _join(
        fallback_note,
        _cut_reason(request, limit) if screen_status == "cut" else None,
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
    eta = _eta_of(screen, metric, screen_wall)

    # -- stage 2: profile the top k under the final backend ------------------------------
    skip = _skip_reason(request, screen_status, kept, budget, eta, cancel)
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
            partial = _partial(result_id, created, [screen_report, profile_report], screen)
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
        final_result = _tagged(final_result, "profile")
        status = _stage_status(final_result, budget.bound(limit))
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
                "Reason": _cut_reason(request, limit)
                if status == "cut"
                else (final_result.message if status == "failed" else None),
            }
        )
    return _merged(
        request,
        result_id,
        created,
        screen,
        final_result,
        [screen_report, profile_report],
        wall_s=clock() - budget.t0,
        flags=flags,
    )


def _stage_status(result: ProfileResult, budget_bound: bool) -> StageStatus:
    if result.status == "cancelled":
        return "cancelled"
    timed_out = result.error is not None and result.error.ErrorClass is ErrorClass.TIMEOUT
    if timed_out and budget_bound:
        return "cut"
    if result.status == "failed":
        return "failed"
    return "done"


def _cut_reason(request: ProfileRequest, limit: float) -> str:
    return (
        f"budget_s={request.budget_s:g} was spent: the stage got the {limit:.1f} s left and was "
        "stopped; its rows of calls finished before are kept"
    )


def _skip_reason(
    request: ProfileRequest,
    screen_status: StageStatus,
    kept: list[str],
    budget: _Budget,
    eta: StageEta | None,
    cancel: threading.Event | None,
) -> str | None:
    """Why the profile stage does not start, or None when it does."""
    if screen_status == "cancelled" or (cancel is not None and cancel.is_set()):
        return "the job was cancelled during the screen"
    if screen_status == "cut":
        return f"budget_s={request.budget_s:g} was spent during the screen"
    if not kept:
        return "no candidate passed the screen (see the screen stage's Ranking for why)"
    left = budget.left()
    if left is None:
        return None
    start_s = eta.fixed_s if eta is not None else 0.0
    if left <= max(start_s, 0.0):
        return (
            f"budget_s={request.budget_s:g}: {max(left, 0.0):.1f} s were left, less than the "
            f"{start_s:.1f} s the screen needed before its first timed call, so the profile "
            "stage could not time a single call; raise budget_s to profile the top candidates"
        )
    return None


def _eta_of(screen: ProfileResult, metric: str, wall_s: float) -> StageEta | None:
    """The screen's fixed cost and seconds per timed call, from its own measurements."""
    calls = sum(r.NumRuns for r in screen.rows if r.Metric == metric)
    if calls <= 0:
        return None
    phases = screen.provenance.phase_seconds if screen.provenance is not None else {}
    timed_s = phases.get("profile")
    if timed_s is None or timed_s > wall_s:
        return StageEta(fixed_s=0.0, per_call_s=wall_s / calls)
    return StageEta(fixed_s=wall_s - timed_s, per_call_s=timed_s / calls)


def _tagged(result: ProfileResult, stage: StageName) -> ProfileResult:
    """Every row, comparison, check and failure of `result` marked with the stage."""
    mark = {"Stage": stage}
    return result.model_copy(
        update={
            "rows": [r.model_copy(update=mark) for r in result.rows],
            "comparisons": [c.model_copy(update=mark) for c in result.comparisons],
            "correctness": [c.model_copy(update=mark) for c in result.correctness],
            "failures": [f.model_copy(update=mark) for f in result.failures],
            "error": result.error.model_copy(update=mark) if result.error is not None else None,
        }
    )


def _partial(
    result_id: str, created: str, reports: list[StageReport], screen: ProfileResult | None
) -> ProfileResult:
    """What read_results shows while a stage runs: the finished stages and every stage's state."""
    running = next((r for r in reports if r.Status == "running"), None)
    message = f"stage {running.Stage} running under {running.Backend}" if running else "running"
    if screen is None:
        return ProfileResult(
            result_id=result_id,
            status="running",
            message=message,
            created_at=created,
            stages=reports,
        )
    return screen.model_copy(
        update={
            "status": "running",
            "message": f"{message}; the screen's rows are below",
            "finished_at": None,
            "stages": reports,
        }
    )


def _merged(
    request: ProfileRequest,
    result_id: str,
    created: str,
    screen: ProfileResult,
    final: ProfileResult | None,
    reports: list[StageReport],
    *,
    wall_s: float,
    flags: Sequence[str] = (),
) -> ProfileResult:
    """One result: the profile stage's rows first (the numbers to report), then the screen's."""
    screen_report, profile_report = reports
    ranking = screen_report.Ranking
    passed = [r for r in ranking if r.Rank is not None]
    kept = [r.Annotation for r in ranking if r.Kept]
    parts = [
        f"staged: the screen ({screen_report.Backend}) checked and timed "
        f"{len(request.candidates)} candidate(s), {len(passed)} passed and were ranked"
    ]
    if screen_report.Reason:
        parts.append(f"screen: {screen_report.Reason}")
    if profile_report.Status == "skipped":
        parts.append(f"profile stage skipped: {profile_report.Reason}")
    else:
        parts.append(
            f"kept the top {len(kept)} {kept} for the profile stage ({profile_report.Backend}): "
            f"{profile_report.Status}"
            + (f" ({profile_report.Reason})" if profile_report.Reason else "")
        )
    left_out = [r for r in ranking if not r.Kept]
    if left_out:
        parts.append(
            "left out: "
            + "; ".join(f"{r.Annotation}: {r.Why}" for r in left_out[:8])
            + ("; ..." if len(left_out) > 8 else "")
        )
    if flags:
        parts.append(
            f"cross-check: {len(flags)} disagreement(s) between the screen and the profile "
            f"stage ({'; '.join(flags[:5])}{'; ...' if len(flags) > 5 else ''}): see the "
            "profile rows' Reasons and CrossCheck"
        )
    base = final if final is not None else screen
    status: JobStatus
    if final is not None:
        status = final.status
    elif screen.status in ("failed", "cancelled"):
        status = screen.status
    else:
        status = "done"
    parts.append(base.message)
    provenance = _provenance(base.provenance, reports, wall_s)
    artifacts = dict(final.artifacts) if final is not None else {}
    artifacts.update({f"screen_{k}": v for k, v in screen.artifacts.items()})
    return base.model_copy(
        update={
            "result_id": result_id,
            "status": status,
            "message": "; ".join(p for p in parts if p),
            "created_at": created,
            "finished_at": iso(utc_now()),
            "rows": (final.rows if final else []) + screen.rows,
            "comparisons": (final.comparisons if final else []) + screen.comparisons,
            "correctness": (final.correctness if final else []) + screen.correctness,
            "failures": (final.failures if final else []) + screen.failures,
            "error": final.error if final is not None else screen.error,
            "provenance": provenance,
            "artifacts": artifacts,
            "stages": reports,
        }
    )


def _provenance(
    base: Provenance | None, reports: list[StageReport], wall_s: float
) -> Provenance | None:
    if base is None:
        return None
    phases = dict(base.phase_seconds)
    notes = list(base.notes)
    for r in reports:
        if r.WallSeconds is not None:
            phases[f"stage_{r.Stage}"] = r.WallSeconds
        notes.append(
            f"stage {r.Stage} ({r.Backend}): {r.Status}" + (f": {r.Reason}" if r.Reason else "")
        )
    return base.model_copy(
        update={"phase_seconds": phases, "wall_seconds": round(wall_s, 3), "notes": notes}
    )


def _join(*parts: str | None) -> str | None:
    text = "; ".join(p for p in parts if p)
    return text or None
