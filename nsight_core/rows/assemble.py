"""A finished run -> ProfileResult: records from the backend, then rows, then the verdicts.

The stage after the job's processes. It trusts no number from the contestant: the backend
reads its own records (an ncu report, or raw per-run samples the judge relayed), statistics
are computed here (aggregate.py), and what the judge found suspect is applied to rows:

- a rebound timer or harness function makes every in-process row suspicious;
- a rebound framework function, a shadowing file or a reference that disagreed with itself
  makes every row suspicious;
- under an external profiler, a candidate that launched exactly the reference's kernels is
  named (a fallback to the reference looks like any other candidate otherwise).

`finish_result` (`rows.provenance`) is the one finishing step of request jobs and `@kernel`
jobs. A request that another backend answered where its own could not read counters is
labelled last (`rows.fallback`).

The result's message is built from the failures recorded (`rows.failures` tells each in
words), never from a fixed sentence, and a failure of the reference (or the input maker)
comes first, since no candidate can be judged where the reference failed. ``__all__`` keeps
the names callers import from here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nsight_core.collectors import get_backend
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.host.ceilings import GpuCeilings
from nsight_core.host.contention import contention, gpu_shared
from nsight_core.protocol import CheckEvent, RunKey, SuspectEvent
from nsight_core.request import ProfileRequest
from nsight_core.results import (
    Correctness,
    Failure,
    JobStatus,
    ProfileResult,
    Row,
    iso,
    marked,
    suspected,
    utc_now,
)
from nsight_core.rows.aggregate import (
    RowContext,
    RunValues,
    aggregate_rows,
    compare_to_reference,
    reduce_runs,
)
from nsight_core.rows.blind import blind_comparisons, blind_message, blind_rows
from nsight_core.rows.diagnose import JobDiagnosis, apply_floor, diagnose_run
from nsight_core.rows.failures import (
    failed_how,
    failure_of_error,
    failure_of_event,
    failures_of,
    first_failure,
    listed_ids,
    on_configs,
    reference_failure,
    user_frame,
)
from nsight_core.rows.fallback import answered_instead, labelled
from nsight_core.rows.gpu_state import apply_gpu_states
from nsight_core.rows.provenance import finish_result, with_waits
from nsight_core.rows.runs import JobRun
from nsight_core.settings import JobSettings

__all__ = [
    "Collected",
    "apply_suspects",
    "assemble_result",
    "collect_values",
    "correctness_of",
    "diagnose_job",
    "failure_of_error",
    "finish_result",
    "flag_reference_kernels",
    "no_candidate_passed",
    "refused",
    "row_context",
    "user_frame",
    "with_waits",
]


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


@dataclass(frozen=True)
class Collected:
    """Per-run values of a finished run, and every failure found on the way."""

    values: RunValues
    failures: list[Failure]
    gpu: str | None
    suspects: list[SuspectEvent] = field(default_factory=list)
    """The backend's findings while reading (ncu: kernels outside the timed ranges)."""


def collect_values(run: JobRun, settings: JobSettings) -> Collected:
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
    return Collected(values, _with_findings(failures, got.suspects), gpu, got.suspects)


COUNT_FAILURES = (ErrorClass.NO_KERNELS, ErrorClass.KERNEL_COUNT_MISMATCH)


def _with_findings(failures: list[Failure], suspects: Sequence[SuspectEvent]) -> list[Failure]:
    """A count failure names what the collector found in the same call windows: a candidate
    whose kernels ran outside its ranges fails on its counts, and the reason is the finding,
    not an empty or changing call."""
    found: dict[str, list[str]] = {}
    for s in suspects:
        if s.annotation is not None and s.reason not in found.get(s.annotation, []):
            found.setdefault(s.annotation, []).append(s.reason)
    out = []
    for f in failures:
        extra = found.get(f.Annotation or "") if f.ErrorClass in COUNT_FAILURES else None
        out.append(f.model_copy(update={"Error": f"{f.Error}; {'; '.join(extra)}"}) if extra else f)
    return out


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


def apply_suspects(rows: list[Row], suspects: Sequence[SuspectEvent], evidence: str) -> list[Row]:
    """Rows made suspicious by what the judge found (see the module docstring)."""
    for s in suspects:
        if s.in_process_only and evidence != "in_process":
            continue
        mark = suspected if s.verdict else marked
        rows = [mark(r, s.reason) if s.annotation in (None, r.Annotation) else r for r in rows]
    return rows


def flag_reference_kernels(rows: list[Row], reference: str) -> list[Row]:
    """Name candidates whose kernels are exactly the reference's, per config and metric.

    A reason, not a verdict: a candidate built on the same library call (a chunked
    torch.softmax) legitimately runs the reference's kernel, and honest controls of the
    correctness catalogue would otherwise be made suspicious. The name makes a silent fallback
    visible; the agent decides whether it meant it."""
    ref = {(r.ConfigId, r.Metric): set(r.Kernels) for r in rows if r.Annotation == reference}
    out = []
    for r in rows:
        kernels = ref.get((r.ConfigId, r.Metric))
        if r.Annotation != reference and kernels and set(r.Kernels) == kernels:
            names = ", ".join(sorted(kernels))[:300]
            r = marked(
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


def diagnose_job(
    run: JobRun,
    settings: JobSettings,
    values: RunValues,
    configs: Sequence[Mapping[str, Any]],
    gpu: str | None,
    measured: GpuCeilings | None = None,
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
        measured=measured,
    )


_JUDGE_EXITS = (ErrorClass.IMPORT_ERROR, ErrorClass.COMPILE_ERROR, ErrorClass.RUNTIME_ERROR)
"""Job errors that are only the judge's exit code for 'the reference, the input maker or a
callable failed': the failure it recorded says which, where and why."""


def _reference_timed(request: ProfileRequest, rows: Sequence[Row]) -> list[int]:
    return sorted(
        {r.ConfigId for r in rows if r.Annotation == request.reference and r.AvgValue is not None}
    )


def _reference_consequence(request: ProfileRequest, rows: Sequence[Row]) -> str:
    """What a reference failure cost: nothing checked or timed, or only some configs."""
    timed = _reference_timed(request, rows)
    if not timed:
        return "nothing was checked or timed"
    lost = [i for i in range(len(request.configs)) if i not in timed]
    if not lost:
        return "its other runs were timed"
    return f"config{'s' if len(lost) > 1 else ''} {listed_ids(lost)} could not be checked or timed"


def _job_error(
    run: JobRun, failures: Sequence[Failure], ref: tuple[str, Failure] | None
) -> Failure | None:
    """The job's error, replaced by the recorded failure it only stands for: an exit code
    of the judge says a callable failed; the failure says which, where and why."""
    if run.error is None:
        return None
    error = failure_of_error(run.error)
    if error.ErrorClass not in _JUDGE_EXITS:
        return error
    if ref is not None:
        return ref[1]
    if error.ErrorClass == ErrorClass.RUNTIME_ERROR:
        return error
    return next((f for f in failures if f.ErrorClass == error.ErrorClass), error)


def _job_message(
    request: ProfileRequest,
    rows: Sequence[Row],
    summary: str,
    error: Failure | None,
    ref: tuple[str, Failure] | None,
    failures: Sequence[Failure] = (),
) -> str:
    """The reference's failure first, then the job's own error, then candidates that a hang,
    their memory or a crash ended, then the rows' summary."""
    parts = []
    if ref is not None:
        parts.append(
            f"reference failed: {ref[0]}; {_reference_consequence(request, rows)}. To fix: "
            "fix the reference (or the input maker) at the file and line given, then profile "
            "again"
        )
    if error is not None and (ref is None or error is not ref[1]):
        hint = f" ({error.Hint})" if error.Hint else ""
        parts.append(f"{error.ErrorClass}: {error.Error}{hint}")
    lost = _lost_candidates(request, failures)
    if lost:
        parts.append(lost)
    if rows or not parts:
        parts.append(summary)
    return "; ".join(parts)


_LOST = (ErrorClass.TIMEOUT, ErrorClass.OUT_OF_MEMORY, ErrorClass.CRASHED)
"""Ways a candidate ends its own calls, named in the headline: its class, the limit that
ended it and what to change, where the rows alone would only show it missing."""


def _lost_candidates(request: ProfileRequest, failures: Sequence[Failure]) -> str:
    inline = request.source is not None
    said = []
    for cand in request.candidates:
        mine = [f for f in failures if f.Annotation == cand and f.ErrorClass in _LOST]
        if mine:
            f = mine[0]
            fix = f" To fix: {f.Hint}" if f.Hint else ""
            said.append(f"{cand!r} {failed_how(f, inline=inline)}.{fix}")
    return " ".join(said)


def _candidate_story(cand: str, result: ProfileResult, inline: bool) -> str:
    """What became of one candidate, without its name."""
    got = first_failure(failures_of(cand, result.failures, result.correctness))
    if got is None:
        return "was not timed and no failure names it (see failures and error)"
    fix = f"; to fix: {got[0].Hint}" if got[0].ErrorClass in _LOST and got[0].Hint else ""
    return failed_how(*got, inline=inline) + fix


def no_candidate_passed(request: ProfileRequest, result: ProfileResult) -> ProfileResult:
    """A 'done' result in which no candidate was timed, recorded plainly as 'failed'.

    A candidate passed if it has at least one row with a value; one that failed to import
    or failed its check has none. The message names, per candidate, the phase it failed in
    and why, after the reference's own failure if it had one; the reference's rows stay.
    """
    if result.status != "done" or not request.candidates:
        return result
    timed = {r.Annotation for r in result.rows if r.AvgValue is not None}
    if any(c in timed for c in request.candidates):
        return result
    inline = request.source is not None or request.reference_source is not None
    stories = [(c, _candidate_story(c, result, inline)) for c in request.candidates]
    ref = reference_failure(request, result.failures)
    if len(stories) == 1:
        said = "the only candidate, {!r}, {}".format(*stories[0])
    else:
        listed = "; ".join(f"{c!r} {story}" for c, story in stories)
        said = f"none of the {len(stories)} candidates was timed: {listed}"
    if ref is not None:
        said = f"{ref[0]}; {said}"
    ref_timed = _reference_timed(request, result.rows)
    if not ref_timed:
        who_timed = "Nothing was timed"
    elif ref is not None:
        who_timed = f"Only the reference was timed,{on_configs(list(ref_timed))}"
    else:
        who_timed = "Only the reference was timed"
    message = (
        f"no candidate passed: {said}. {who_timed}. To fix: fix "
        f"{'the reference first, then ' if ref is not None else ''}the candidates (see "
        "failures and correctness) and profile again"
    )
    error = (
        result.error
        or (ref[1] if ref is not None else None)
        or _first_candidate_failure(request, result)
    )
    return result.model_copy(update={"status": "failed", "message": message, "error": error})


def _first_candidate_failure(request: ProfileRequest, result: ProfileResult) -> Failure | None:
    for cand in request.candidates:
        got = first_failure(failures_of(cand, result.failures, result.correctness))
        if got is not None:
            return got[0]
    return None


def assemble_result(
    request: ProfileRequest,
    run: JobRun,
    *,
    result_id: str,
    created_at: str,
    measured: GpuCeilings | None = None,
) -> ProfileResult:
    """``measured``: the job GPU's calibrated ceilings (host/ceilings.py), if it has them."""
    settings = run.settings
    got = collect_values(run, settings)
    values, failures, gpu = got.values, got.failures, got.gpu
    ctx = row_context(settings, request.configs, gpu)
    rows = aggregate_rows(values, ctx)
    # The physical floor on every backend, and the diagnosis (diagnose.py).
    diagnosed = diagnose_job(run, settings, values, request.configs, gpu, measured)
    rows = apply_floor(rows, diagnosed.floors)
    rows = apply_suspects(rows, [*run.events.suspects, *got.suspects], ctx.evidence)
    rows = get_backend(settings.backend).annotate_rows(rows)
    busy = contention(*run.host) if run.host is not None else None
    if busy is not None and ctx.evidence == "in_process":
        rows = [marked(r, busy) for r in rows]
    shared = gpu_shared(run.host[1]) if run.host is not None else None
    if shared is not None:  # every backend: another tenant's kernels share the GPU
        rows = [marked(r, shared) for r in rows]
    rows = apply_gpu_states(rows, run.events.gpu_states)  # the judge's NVML readings
    if ctx.evidence == "external":
        rows = flag_reference_kernels(rows, request.reference)
    comparisons = compare_to_reference(values, request.reference, request.candidates, ctx=ctx)
    # Configs whose check cannot tell work from no work (judge/discrimination.py).
    rows = blind_rows(rows, run.events.checks)
    comparisons = blind_comparisons(comparisons, run.events.checks)
    rows, comparisons = labelled(request, rows, comparisons, values, ctx)  # another backend's
    correctness = correctness_of(request, run.events.checks)
    ref = reference_failure(request, failures)
    error = _job_error(run, failures, ref)
    status: JobStatus
    if run.outcome.cancelled:
        status = "cancelled"
    elif error is not None and not rows:
        status = "failed"
    else:
        status = "done"
    passed = sum(1 for c in correctness if c.Passed)
    summary = _summary(rows, len(correctness), passed, len(failures))
    message = _job_message(request, rows, summary, error, ref, failures)
    blind = blind_message(run.events.checks)
    if blind:
        message = f"{message}; {blind}"
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
    # Last, so that its word on another backend leads whatever message was made above.
    return answered_instead(request, no_candidate_passed(request, result))
