"""Worker run -> ProfileResult: records from the report (or raw samples), then rows.

The stage after the worker. It trusts no number from the child: for ncu it reads the
report ncu wrote; for events it takes the child's raw per-run samples, refuses duplicates
and runs nobody asked for, and computes every statistic here (aggregate.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nsight_core.aggregate import (
    RowContext,
    RunValues,
    aggregate_rows,
    compare_to_reference,
    reduce_runs,
)
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.extract import KernelRecord, extract_records
from nsight_core.pipeline import (
    WorkerRun,
    correctness_of,
    failure_of_error,
    failure_of_event,
    provenance_of,
    utc_now,
)
from nsight_core.protocol import RunKey, SampleEvent
from nsight_core.request import KernelsSpec, ProfileRequest
from nsight_core.results import Failure, ProfileResult, Row

EVENTS_KERNEL = "call"
"""Kernel name of events-backend records: the sample times the whole call, not a kernel."""


def records_from_samples(
    samples: Sequence[SampleEvent],
) -> tuple[list[KernelRecord], list[Failure]]:
    """Raw events samples as records; a duplicate (key, metric) is refused, not averaged."""
    seen: set[tuple[RunKey, str]] = set()
    records: list[KernelRecord] = []
    failures: list[Failure] = []
    for seq, s in enumerate(samples):
        key = RunKey(s.annotation, s.config_id, s.run)
        if (key, s.metric) in seen:
            failures.append(
                Failure(
                    Annotation=s.annotation,
                    ConfigId=s.config_id,
                    Run=s.run,
                    ErrorClass=ErrorClass.PROFILER_ERROR,
                    Error=f"the worker sent two samples for run {s.run}; the run is refused",
                )
            )
            records = [r for r in records if (r.key, r.metric) != (key, s.metric)]
            continue
        seen.add((key, s.metric))
        kernel = s.kernel or EVENTS_KERNEL
        records.append(KernelRecord(key, kernel, kernel, s.metric, s.value, s.unit, seq))
    return records, failures


def records_from_report(
    run: WorkerRun, metrics: Sequence[str]
) -> tuple[list[KernelRecord], list[str], str | None, list[Failure]]:
    """Records of the ncu report, the metrics it really holds, the GPU name, failures.

    ncu 2025.3 accepts an unknown metric name silently (exit 0, no log error, the report
    simply lacks it; seen on the H200), so a requested metric that no action carries is
    reported here as invalid_metric instead of turning into a column of nulls.
    """
    if run.report_path is None:
        return [], list(metrics), None, []
    try:
        report = extract_records(run.report_path, metrics)
    except NsightCoreError as err:
        return [], list(metrics), None, [failure_of_error(err, "extract")]
    present = [
        m for m in metrics if any(r.metric == m and r.value is not None for r in report.records)
    ]
    failures = [
        Failure(
            ErrorClass=ErrorClass.INVALID_METRIC,
            Error=f"ncu recorded no value of {m!r} for any kernel: not a metric of this chip "
            "and ncu version (ncu ignores unknown names without an error)",
            Hint="call validate_metrics for the valid names",
            Phase="extract",
        )
        for m in metrics
        if m not in present and report.records
    ]
    kept = present if report.records else list(metrics)
    records = [r for r in report.records if r.metric in kept]
    return records, kept, report.device.display_name, failures


def _summary(result_rows: Sequence[Row], checks: int, passed: int, failures: int) -> str:
    trust: dict[str, int] = {}
    for r in result_rows:
        trust[r.Trust] = trust.get(r.Trust, 0) + 1
    parts = [f"{len(result_rows)} rows ({', '.join(f'{n} {t}' for t, n in sorted(trust.items()))})"]
    if checks:
        parts.append(f"{passed}/{checks} candidate-config checks passed")
    if failures:
        parts.append(f"{failures} failures (see failures)")
    return "; ".join(parts)


@dataclass(frozen=True)
class Collected:
    """Per-run values of a finished worker run, and every failure found on the way."""

    values: RunValues
    failures: list[Failure]
    gpu: str | None


def collect_values(
    run: WorkerRun, *, backend: str, metrics: Sequence[str], kernels: KernelsSpec
) -> Collected:
    """The worker's events and the report (or raw samples) -> one value per run and metric."""
    ev = run.events
    failures = [failure_of_event(f) for f in ev.failures]
    if ev.bad_lines:
        failures.append(
            Failure(
                ErrorClass=ErrorClass.PROFILER_ERROR,
                Error=f"{ev.bad_lines} event line(s) from the worker could not be parsed",
                Phase="collect",
            )
        )
    expected = list(dict.fromkeys(RunKey(r.annotation, r.config_id, r.run) for r in ev.ranges))
    gpu = ev.done.device if ev.done else None
    if backend == "ncu":
        records, kept, report_gpu, extra = records_from_report(run, metrics)
        gpu = report_gpu or gpu
    else:
        records, extra = records_from_samples(ev.samples)
        kept = sorted({r.metric for r in records})
    failures += extra
    run_failures = [f for f in failures if f.Run is not None or f.Phase == "profile"]
    values = reduce_runs(records, expected, kept, kernels, failures=run_failures)
    failures += [f for f in values.failures if f not in failures]
    for key in values.unexpected_keys:
        failures.append(
            Failure(
                Annotation=key.annotation,
                ConfigId=key.config_id,
                Run=key.run,
                ErrorClass=ErrorClass.PROFILER_ERROR,
                Error="kernels were attributed to a run the worker did not report; ignored",
                Phase="collect",
            )
        )
    return Collected(values, failures, gpu)


def row_context(
    backend: str,
    *,
    configs: Sequence[Mapping[str, Any]],
    cache_control: str,
    clock_control: str,
    replay_mode: str,
    check_enabled: bool,
    runs: int,
    gpu: str | None,
) -> RowContext:
    """The settings every row records; ncu's own settings only where ncu ran."""
    ncu = backend == "ncu"
    return RowContext(
        configs=configs,
        backend=backend,
        gpu=gpu,
        cache_control=cache_control if ncu else None,
        clock_control=clock_control if ncu else None,
        replay_mode=replay_mode if ncu else None,
        check_enabled=check_enabled,
        requested_runs=runs,
    )


def assemble_result(
    request: ProfileRequest, run: WorkerRun, *, result_id: str, created_at: str
) -> ProfileResult:
    got = collect_values(
        run, backend=request.backend, metrics=request.metrics, kernels=request.kernels
    )
    values, failures, gpu = got.values, got.failures, got.gpu
    ctx = row_context(
        request.backend,
        configs=request.configs,
        cache_control=request.cache_control,
        clock_control=request.clock_control,
        replay_mode=request.kernels.replay_mode,
        check_enabled=request.check.enabled,
        runs=request.runs,
        gpu=gpu,
    )
    rows = aggregate_rows(values, ctx)
    comparisons = compare_to_reference(values, request.reference, request.candidates, ctx=ctx)
    correctness = correctness_of(request, run.events.checks)
    error = failure_of_error(run.error) if run.error is not None else None
    if error is not None and error.ErrorClass in (
        ErrorClass.IMPORT_ERROR,
        ErrorClass.COMPILE_ERROR,
    ):
        # The worker's own report (file, line, traceback) says more than its exit code.
        detail = next((f for f in failures if f.ErrorClass == error.ErrorClass), None)
        error = detail or error
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
    settings = {
        "cache_control": ctx.cache_control,
        "clock_control": ctx.clock_control,
        "replay_mode": ctx.replay_mode,
    }
    artifacts = dict(run.artifacts)
    artifacts["job_dir"] = str(run.job_dir)
    return ProfileResult(
        result_id=result_id,
        status=status,
        message=message,
        created_at=created_at,
        finished_at=utc_now(),
        rows=rows,
        comparisons=comparisons,
        correctness=correctness,
        failures=failures,
        error=error,
        provenance=provenance_of(run, gpu=gpu, settings=settings),
        artifacts=artifacts,
    )
