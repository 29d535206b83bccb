"""A finished run -> ProfileResult: records from the backend, then rows, then the verdicts.

The stage after the job's processes. It trusts no number from the contestant: the backend
reads its own records (an ncu report, or raw per-run samples the judge relayed), statistics
are computed here (aggregate.py), and what the judge found suspect is applied to rows:

- a rebound timer or harness function makes every in-process row suspicious;
- a rebound framework function, a shadowing file or a reference that disagreed with itself
  makes every row suspicious;
- under an external profiler, a candidate that launched exactly the reference's kernels is
  named (a fallback to the reference looks like any other candidate otherwise).

`finish_result` is the one finishing step of request jobs and `@kernel` jobs.
"""

from __future__ import annotations

import platform
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from nsight_core.aggregate import (
    RowContext,
    RunValues,
    aggregate_rows,
    compare_to_reference,
    reduce_runs,
)
from nsight_core.collectors import get_backend
from nsight_core.collectors.cupti import flag_host_bound
from nsight_core.diagnose import JobDiagnosis, apply_floor, diagnose_run
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.protocol import CheckEvent, FailureEvent, RunKey, SuspectEvent
from nsight_core.request import ProfileRequest
from nsight_core.results import (
    Comparison,
    Correctness,
    Failure,
    JobStatus,
    ProfileResult,
    Provenance,
    Row,
    iso,
    utc_now,
)
from nsight_core.runs import WorkerRun
from nsight_core.settings import JobSettings


def failure_of_event(ev: FailureEvent) -> Failure:
    return Failure(
        Annotation=ev.annotation,
        ConfigId=ev.config_id,
        Run=ev.run,
        Phase=ev.phase,
        ErrorClass=ev.error_class,
        Error=ev.message,
        Traceback=ev.traceback,
        File=ev.file,
        Line=ev.line,
    )


def failure_of_error(err: NsightCoreError, phase: str | None = None) -> Failure:
    return Failure(ErrorClass=err.error_class, Error=err.message, Hint=err.hint, Phase=phase)


def refused(err: NsightCoreError, *, result_id: str, created_at: str) -> ProfileResult:
    """The result of a request refused before anything ran (its preflight)."""
    return ProfileResult(
        result_id=result_id,
        status="failed",
        message=f"{err.error_class}: {err}",
        created_at=created_at,
        finished_at=iso(utc_now()),
        error=failure_of_error(err, "preflight"),
    )


def correctness_of(request: ProfileRequest, checks: Sequence[CheckEvent]) -> list[Correctness]:
    return [
        Correctness(
            Annotation=c.annotation,
            ConfigId=c.config_id,
            Params=request.configs[c.config_id] if c.config_id < len(request.configs) else {},
            Passed=c.passed,
            Seeds=c.seeds,
            MaxAbsError=c.max_abs_error,
            MaxRelError=c.max_rel_error,
            MismatchCount=c.mismatch_count,
            FirstBadIndex=c.first_bad_index,
            Reasons=c.reasons,
            ErrorClass=c.error_class,
            Error=c.message,
        )
        for c in checks
    ]


def _package_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def provenance_of(run: WorkerRun, settings: JobSettings, gpu: str | None) -> Provenance:
    done = run.events.done
    applies = get_backend(settings.backend).settings_apply
    return Provenance(
        backend=run.backend,
        gpu=gpu or (done.device if done else None),
        ncu_version=run.wrapped.tool_version,
        ncu_report_version=_package_version("ncu-report"),
        nspy_version=_package_version("nspy-mcp") or "0.0.0+unknown",
        python=platform.python_version(),
        host=socket.gethostname(),
        cache_control=settings.cache_control if applies else None,
        clock_control=settings.clock_control if applies else None,
        replay_mode=settings.replay_mode if applies else None,
        command=run.wrapped.argv,
        phase_seconds=dict(done.phase_seconds) if done else {},
        wall_seconds=round(run.wall_s, 3),
        contestant_confined=done.confined if done else None,
        notes=list(done.notes) if done else [],
    )


@dataclass(frozen=True)
class Collected:
    """Per-run values of a finished run, and every failure found on the way."""

    values: RunValues
    failures: list[Failure]
    gpu: str | None


def collect_values(run: WorkerRun, settings: JobSettings) -> Collected:
    """The run's events and the backend's records -> one value per run and metric."""
    ev = run.events
    failures = [failure_of_event(f) for f in ev.failures]
    if ev.bad_lines:
        failures.append(
            Failure(
                ErrorClass=ErrorClass.PROFILER_ERROR,
                Error=f"{ev.bad_lines} event line(s) could not be parsed",
                Phase="collect",
            )
        )
    expected = list(dict.fromkeys(RunKey(r.annotation, r.config_id, r.run) for r in ev.ranges))
    got = get_backend(settings.backend).read_records(run.wrapped, ev.samples, settings)
    gpu = got.gpu or (ev.done.device if ev.done else None)
    failures += got.failures
    run_failures = [f for f in failures if f.Run is not None or f.Phase == "profile"]
    values = reduce_runs(
        got.records,
        expected,
        got.metrics,
        settings.kernels,
        failures=run_failures,
        combine_fn=settings.combine_fn,
    )
    failures += [f for f in values.failures if f not in failures]
    # Timed runs of a candidate that later failed its check are withheld by the judge;
    # the profiler still saw their kernels, which is no violation.
    failed = {(c.annotation, c.config_id) for c in ev.checks if not c.passed}
    for key in values.unexpected_keys:
        if (key.annotation, key.config_id) in failed:
            continue
        failures.append(
            Failure(
                Annotation=key.annotation,
                ConfigId=key.config_id,
                Run=key.run,
                ErrorClass=ErrorClass.PROFILER_ERROR,
                Error="kernels were attributed to a run nobody reported; ignored",
                Phase="collect",
            )
        )
    return Collected(values, failures, gpu)


def row_context(
    settings: JobSettings, configs: Sequence[Mapping[str, Any]], gpu: str | None
) -> RowContext:
    """The settings every row records; a profiler's own settings only where they apply."""
    backend = get_backend(settings.backend)
    applies = backend.settings_apply
    return RowContext(
        configs=configs,
        backend=backend.name,
        evidence=backend.evidence,
        gpu=gpu,
        cache_control=settings.cache_control if applies else None,
        clock_control=settings.clock_control if applies else None,
        replay_mode=settings.replay_mode if applies else None,
        check_enabled=settings.check_enabled,
        requested_runs=settings.runs,
    )


def _suspicious(row: Row, reason: str) -> Row:
    if row.Trust == "failed" or reason in row.Reasons:
        return row
    return row.model_copy(update={"Trust": "suspicious", "Reasons": [*row.Reasons, reason]})


def apply_suspects(rows: list[Row], suspects: Sequence[SuspectEvent], evidence: str) -> list[Row]:
    """Rows made suspicious by what the judge found (see the module docstring)."""
    for s in suspects:
        if s.in_process_only and evidence != "in_process":
            continue
        rows = [
            _suspicious(r, s.reason) if s.annotation in (None, r.Annotation) else r for r in rows
        ]
    return rows


def _noted(row: Row, reason: str) -> Row:
    if reason in row.Reasons:
        return row
    return row.model_copy(update={"Reasons": [*row.Reasons, reason]})


def flag_reference_kernels(rows: list[Row], reference: str) -> list[Row]:
    """Name candidates whose kernels are exactly the reference's, per config and metric.

    A reason, not a verdict: a candidate built on the same library call (a chunked
    torch.softmax) legitimately runs the reference's kernel, and on the H200 two such
    controls would otherwise have been made suspicious. The name makes a silent fallback
    visible; the agent decides whether it meant it."""
    ref = {(r.ConfigId, r.Metric): set(r.Kernels) for r in rows if r.Annotation == reference}
    out = []
    for r in rows:
        kernels = ref.get((r.ConfigId, r.Metric))
        if r.Annotation != reference and kernels and set(r.Kernels) == kernels:
            names = ", ".join(sorted(kernels))[:300]
            r = _noted(
                r,
                f"launches exactly the reference's kernels ({names}): a fallback to the "
                "reference, not a new kernel?",
            )
        out.append(r)
    return out


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _summary(rows: Sequence[Row], checks: int, passed: int, failures: int) -> str:
    trust: dict[str, int] = {}
    for r in rows:
        trust[r.Trust] = trust.get(r.Trust, 0) + 1
    kinds = ", ".join(f"{n} {t}" for t, n in sorted(trust.items()))
    parts = [_plural(len(rows), "row") + (f" ({kinds})" if kinds else "")]
    if checks:
        parts.append(f"{passed}/{checks} candidate-config checks passed")
    if failures:
        parts.append(f"{_plural(failures, 'failure')} (see failures)")
    return "; ".join(parts)


def finish_result(
    run: WorkerRun,
    settings: JobSettings,
    *,
    result_id: str,
    created_at: str,
    rows: list[Row],
    gpu: str | None,
    failures: list[Failure],
    status: JobStatus,
    message: str,
    error: Failure | None,
    comparisons: list[Comparison] | None = None,
    correctness: list[Correctness] | None = None,
    diagnosed: JobDiagnosis | None = None,
) -> ProfileResult:
    """The one finishing step: provenance, artifacts and timestamps for any job's result."""
    provenance = provenance_of(run, settings, gpu)
    if diagnosed is not None and diagnosed.notes:
        provenance.notes += diagnosed.notes
    return ProfileResult(
        result_id=result_id,
        status=status,
        message=message,
        created_at=created_at,
        finished_at=iso(utc_now()),
        rows=rows,
        comparisons=comparisons or [],
        correctness=correctness or [],
        failures=failures,
        error=error,
        provenance=provenance,
        artifacts={**run.artifacts, "job_dir": str(run.job_dir)},
        diagnoses=diagnosed.diagnoses if diagnosed is not None else [],
    )


def diagnose_job(
    run: WorkerRun,
    settings: JobSettings,
    values: RunValues,
    configs: Sequence[Mapping[str, Any]],
    gpu: str | None,
) -> JobDiagnosis:
    """diagnose.py over a finished job: diagnoses (with ``diagnose``) and the rows' floors."""
    return diagnose_run(
        run.wrapped.report_path,
        diagnose=settings.diagnose,
        groups=list(dict.fromkeys((k.annotation, k.config_id) for k in values.expected_keys)),
        configs=configs,
        floor_events=run.events.floors,
        gpu=gpu,
        check_enabled=settings.check_enabled,
        ignore=settings.kernels.ignore,
    )


def no_candidate_passed(request: ProfileRequest, result: ProfileResult) -> ProfileResult:
    """A 'done' result in which no candidate was timed, recorded plainly as 'failed'.

    A candidate passed if it has at least one row with a value; one that failed to import
    or failed its check has none. The reference's rows stay, the message says it first.
    """
    if result.status != "done" or not request.candidates:
        return result
    timed = {r.Annotation for r in result.rows if r.AvgValue is not None}
    if any(c in timed for c in request.candidates):
        return result
    why = []
    for cand in request.candidates:
        failed = [f for f in result.failures if f.Annotation == cand]
        checks = [c for c in result.correctness if c.Annotation == cand and not c.Passed]
        if failed:
            why.append(f"{cand!r} {failed[0].ErrorClass}: {failed[0].Error}")
        elif checks:
            cls = checks[0].ErrorClass or ErrorClass.INCORRECT
            why.append(f"{cand!r} {cls} (see correctness)")
        else:
            why.append(f"{cand!r} was not timed")
    noun = "the only candidate" if len(request.candidates) == 1 else "none of the candidates"
    message = (
        f"no candidate passed: {noun} got through import and the correctness check, so "
        f"nothing was compared; {'; '.join(why)}. Only the reference was timed. To fix: "
        "fix the candidates (see failures and correctness) and profile again"
    )
    error = result.error or _first_candidate_failure(request, result)
    return result.model_copy(update={"status": "failed", "message": message, "error": error})


def _first_candidate_failure(request: ProfileRequest, result: ProfileResult) -> Failure | None:
    for f in result.failures:
        if f.Annotation in request.candidates:
            return f
    for c in result.correctness:
        if c.Annotation in request.candidates and not c.Passed:
            return Failure(
                Annotation=c.Annotation,
                ConfigId=c.ConfigId,
                Phase="check",
                ErrorClass=c.ErrorClass or ErrorClass.INCORRECT,
                Error=c.Error or "; ".join(c.Reasons) or "output differs from the reference",
                Hint="see this candidate's correctness entries",
            )
    return None


def assemble_result(
    request: ProfileRequest, run: WorkerRun, *, result_id: str, created_at: str
) -> ProfileResult:
    settings = JobSettings.of_request(request)
    got = collect_values(run, settings)
    values, failures, gpu = got.values, got.failures, got.gpu
    ctx = row_context(settings, request.configs, gpu)
    rows = aggregate_rows(values, ctx)
    # -- issue 15: the physical floor on every backend, and the diagnosis (diagnose.py) --
    diagnosed = diagnose_job(run, settings, values, request.configs, gpu)
    rows = apply_floor(rows, diagnosed.floors)
    # -- end issue 15 --
    rows = apply_suspects(rows, run.events.suspects, ctx.evidence)
    rows = flag_host_bound(rows)  # cupti rows only: latency far above kernel time
    if ctx.evidence == "external":
        rows = flag_reference_kernels(rows, request.reference)
    comparisons = compare_to_reference(values, request.reference, request.candidates, ctx=ctx)
    correctness = correctness_of(request, run.events.checks)
    error = failure_of_error(run.error) if run.error is not None else None
    if error is not None and error.ErrorClass in (
        ErrorClass.IMPORT_ERROR,
        ErrorClass.COMPILE_ERROR,
    ):
        # The job's own report (file, line, traceback) says more than its exit code.
        detail = next((f for f in failures if f.ErrorClass == error.ErrorClass), None)
        error = detail or error
    status: JobStatus
    if run.outcome.cancelled:
        status = "cancelled"
    elif error is not None and not rows:
        status = "failed"
    else:
        status = "done"
    passed = sum(1 for c in correctness if c.Passed)
    message = _summary(rows, len(correctness), passed, len(failures))
    if error is not None:
        message = (
            f"{error.ErrorClass}: {error.Error}"
            + (f" ({error.Hint})" if error.Hint else "")
            + (f"; {message}" if rows else "")
        )
    result = finish_result(
        run,
        settings,
        result_id=result_id,
        created_at=created_at,
        rows=rows,
        gpu=gpu,
        failures=failures,
        status=status,
        message=message,
        error=error,
        comparisons=comparisons,
        correctness=correctness,
        diagnosed=diagnosed,
    )
    return no_candidate_passed(request, result)
