"""Stage 1 of the rows: attributed kernel records -> one value per (run, metric), `RunValues`.

Kernels are grouped by their `RunKey` (identity from the NVTX range, never position), ignore
globs drop helper kernels (and the dropped names are kept), counts are checked per run, and
several kernels of one call are folded by a named reducer chosen per metric. A failed run
keeps its cell with the error instead of a value, so stage 2 (`aggregate`) can name it.

Each run also keeps its kernel set (`collectors.kernel_sets`): its kernels with their
launches, and under cupti its copies, after the ignore globs; rows compare them across a
row's runs (aggregate.py).

Where the request names no reducer for a metric, a call's kernels are summed when the
metric is a time or a count (`metric_kind` says which), since a call that launches several
kernels is one call to its caller; any other metric keeps needing one kernel per call,
because a sum of rates or averages is no rate. `refuse_summed_rates` and `combine_note`
apply the same rule before a job runs.
"""

from __future__ import annotations

import fnmatch
import functools
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from nsight_core.collectors.extract import KernelRecord
from nsight_core.collectors.kernel_sets import COPY_METRIC, Work, work_of
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.host.metric_check import metric_kind, unsummed_note
from nsight_core.protocol import RunKey
from nsight_core.request import KernelsSpec, Reducer
from nsight_core.results import Failure

MAX_ERROR_RUNS_LISTED = 8
"""Long count tables are cut here; the failure's message says how many were left out."""


@dataclass(frozen=True)
class RunValue:
    """One run's value of one metric, after ignoring, counting and reducing its kernels."""

    key: RunKey
    metric: str
    value: float | None
    unit: str
    kernels: tuple[str, ...] = ()
    """Kernel names of the run in launch order, after the ignore globs."""
    ignored: tuple[str, ...] = ()
    """Kernel names the ignore globs dropped from this run."""
    error_class: ErrorClass | None = None
    error: str | None = None
    summed: int = 0
    """How many kernels the default reducer (`sum`, for a time or count the request named
    no reducer for) folded into this value, when more than one; else 0."""
    kernel_set: tuple[Work, ...] = ()
    """The run's kernels with their launches, and its copies (cupti), after the ignore
    globs, sorted: what `kernel_sets.kernel_set_finding` compares across a row's runs."""

    @property
    def kernel(self) -> str | None:
        return "|".join(self.kernels) if self.kernels else None


GroupKey = tuple[str, int, str]
"""(annotation, config_id, metric): the unit every statistic is computed over."""


@dataclass(frozen=True)
class RunValues:
    """Per-run values for every expected run and metric, plus the failures found on the way."""

    values: Mapping[tuple[RunKey, str], RunValue]
    expected_keys: tuple[RunKey, ...]
    metrics: tuple[str, ...]
    failures: tuple[Failure, ...] = ()
    """Failures found by reduction: count mismatch, no kernels, reducer 'none' with > 1 kernel."""
    unexpected_keys: tuple[RunKey, ...] = ()
    """Runs that kernels were attributed to but nobody asked for (a protocol violation)."""

    def groups(self) -> dict[GroupKey, list[RunValue]]:
        """Values by (annotation, config_id, metric), runs ascending; first-appearance order."""
        out: dict[GroupKey, list[RunValue]] = {}
        for key in self.expected_keys:
            for metric in self.metrics:
                out.setdefault((key.annotation, key.config_id, metric), [])
        for (key, metric), value in self.values.items():
            out.setdefault((key.annotation, key.config_id, metric), []).append(value)
        for cells in out.values():
            cells.sort(key=lambda v: v.key.run)
        return out

    def get(self, key: RunKey, metric: str) -> RunValue | None:
        return self.values.get((key, metric))


def _failure_for(key: RunKey, failures: Sequence[Failure]) -> Failure | None:
    for f in failures:
        if f.Annotation not in (None, key.annotation):
            continue
        if f.ConfigId not in (None, key.config_id) or f.Run not in (None, key.run):
            continue
        return f
    return None


def _reduce(reducer: Reducer, values: Sequence[float]) -> float:
    if reducer in ("none", "first"):
        return values[0]
    if reducer == "last":
        return values[-1]
    if reducer == "sum":
        return math.fsum(values)
    if reducer == "max":
        return max(values)
    if reducer == "min":
        return min(values)
    return statistics.fmean(values)


def _count_table(runs: Mapping[RunKey, tuple[str, ...]]) -> str:
    parts = [
        f"run {k.run}: {len(names)} [{', '.join(names) or '-'}]"
        for k, names in sorted(runs.items())[:MAX_ERROR_RUNS_LISTED]
    ]
    if len(runs) > MAX_ERROR_RUNS_LISTED:
        parts.append(f"... {len(runs) - MAX_ERROR_RUNS_LISTED} more runs")
    return "; ".join(parts)


@dataclass
class _Run:
    """Mutable working state of one run while reducing."""

    key: RunKey
    kept: list[KernelRecord] = field(default_factory=list)
    kernels: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()
    kernel_set: tuple[Work, ...] = ()
    failure: Failure | None = None


def _split_ignored(key: RunKey, records: Sequence[KernelRecord], ignore: Sequence[str]) -> _Run:
    run = _Run(key)
    launches: dict[int, str] = {}
    dropped: dict[int, str] = {}
    works: dict[int, Work] = {}
    for rec in sorted(records, key=lambda r: r.seq):
        copy = rec.metric == COPY_METRIC  # in the kernel set only: no launch, no value
        if any(fnmatch.fnmatchcase(rec.kernel, pattern) for pattern in ignore):
            if not copy:
                dropped[rec.seq] = rec.kernel
            continue
        works.setdefault(rec.seq, work_of(rec.kernel, rec.launch, copy=copy))
        if not copy:
            launches[rec.seq] = rec.kernel
            run.kept.append(rec)
    run.kernels = tuple(launches.values())
    run.ignored = tuple(dropped.values())
    run.kernel_set = tuple(sorted(works.values()))
    return run


def _group_failure(annotation: str, config_id: int, runs: list[_Run]) -> Failure | None:
    """Count check over the runs of one (annotation, config) that did not fail otherwise."""
    live = {r.key: r.kernels for r in runs if r.failure is None}
    if not live:
        return None
    counts = {len(names) for names in live.values()}
    if counts == {0}:
        return Failure(
            Annotation=annotation,
            ConfigId=config_id,
            ErrorClass=ErrorClass.NO_KERNELS,
            Error=f"{annotation} config {config_id}: no kernel was profiled in any run",
            Hint="make sure the callable launches GPU work inside the call "
            "(and that the ignore globs do not drop all of it)",
        )
    if len(counts) > 1:
        return Failure(
            Annotation=annotation,
            ConfigId=config_id,
            ErrorClass=ErrorClass.KERNEL_COUNT_MISMATCH,
            Error=f"{annotation} config {config_id}: runs launched different numbers of kernels: "
            + _count_table(live),
            Hint="warm up autotuning and caches, ignore helper kernels with kernels.ignore, "
            "or make the call launch the same kernels every time",
        )
    return None


def reducer_for(kernels: KernelsSpec, metric: str) -> Reducer:
    """The reducer the request names for `metric`, else the default: `sum` for a time or a
    count (a `.sum` roll-up), `none` (one kernel per call) for anything else."""
    named = kernels.named(metric)
    if named is not None:
        return named
    return "sum" if metric_kind(metric) == "total" else "none"


def refuse_summed_rates(metrics: Sequence[str], kernels: KernelsSpec) -> None:
    """Refuse `sum` named for a rate (a percentage, ratio, per-second or per-cycle value),
    before anything runs: several kernels' rates do not add up, so the rows could only be
    wrong. Averages and unknown names stay the caller's call."""
    rates = [m for m in metrics if kernels.named(m) == "sum" and metric_kind(m) == "rate"]
    if not rates:
        return
    them = "it is a rate" if len(rates) == 1 else "they are rates"
    raise NsightCoreError(
        ErrorClass.INVALID_REQUEST,
        f"kernels.combine sums {', '.join(rates)}, but {them}: the sum of several kernels' "
        "percentages or rates is no percentage or rate",
        "leave kernels.combine out, which sums times and counts and keeps one kernel per call "
        f"for the rest, or name a reducer per metric, e.g. {{'gpu__time_duration.sum': 'sum', "
        f"{rates[0]!r}: 'max'}}; max, min, mean, first or last fit a rate",
    )


def combine_note(metrics: Sequence[str], kernels: KernelsSpec) -> str | None:
    """What a call that launches several kernels would meet: the metrics the request names
    no reducer for that are not summed by default (`unsummed_note`); None when there are none."""
    return unsummed_note([m for m in metrics if kernels.named(m) is None])


def _too_many_kernels(run: _Run, metric: str, count: int, *, named: bool) -> str:
    what = (
        f"{run.key.annotation} config {run.key.config_id} run {run.key.run} launched "
        f"{count} kernels [{', '.join(run.kernels)}]"
    )
    if named:
        return (
            f"{what} but combine is 'none' for {metric}; set kernels.combine (e.g. 'sum' for "
            "times), ignore helper kernels, or use replay_mode 'range'"
        )
    kind = "a rate" if metric_kind(metric) == "rate" else "not a time or count total"
    return (
        f"{what}, and {metric} is {kind}, so they are not summed by default; name a reducer "
        f"for it in kernels.combine (e.g. {{{metric!r}: 'max'}}; max, min, mean, first or "
        "last), ignore helper kernels, or use replay_mode 'range'"
    )


def _run_value(
    run: _Run,
    metric: str,
    kernels: KernelsSpec,
    combine_fn: Callable[[float, float], float] | None,
) -> RunValue:
    base = RunValue(run.key, metric, None, "", run.kernels, run.ignored)
    if run.failure is not None:
        return _with_error(base, run.failure.ErrorClass, run.failure.Error)
    recs = [r for r in run.kept if r.metric == metric]
    unit = next((r.unit for r in recs if r.unit), "")
    base = RunValue(
        run.key, metric, None, unit, run.kernels, run.ignored, kernel_set=run.kernel_set
    )
    named = combine_fn is not None or kernels.named(metric) is not None
    reducer = combine_fn or reducer_for(kernels, metric)
    if reducer == "none" and len(recs) > 1:
        return _with_error(
            base,
            ErrorClass.KERNEL_COUNT_MISMATCH,
            _too_many_kernels(run, metric, len(recs), named=named),
        )
    missing = [r.kernel for r in recs if r.value is None or not math.isfinite(r.value)]
    if missing or not recs:
        return _with_error(
            base,
            ErrorClass.PROFILER_ERROR,
            f"the report has no numeric {metric} for kernel(s) {', '.join(missing) or '-'} "
            f"of {run.key.range_name()}",
        )
    values = [r.value for r in recs if r.value is not None]
    if callable(reducer):
        try:
            folded = float(functools.reduce(reducer, values))
        except Exception as exc:
            return _with_error(
                base,
                ErrorClass.RUNTIME_ERROR,
                f"combine_kernel_metrics raised on {metric} of {run.key.range_name()}: "
                f"{type(exc).__name__}: {exc}",
            )
        return replace(base, value=folded)
    summed = len(values) if not named and len(values) > 1 else 0
    return replace(base, value=_reduce(reducer, values), summed=summed)


def _with_error(v: RunValue, error_class: ErrorClass, message: str) -> RunValue:
    return replace(v, value=None, error_class=error_class, error=message)


def reduce_runs(
    records: Iterable[KernelRecord],
    expected_keys: Sequence[RunKey],
    metrics: Sequence[str],
    kernels: KernelsSpec,
    *,
    failures: Sequence[Failure] = (),
    combine_fn: Callable[[float, float], float] | None = None,
) -> RunValues:
    """One value per expected run and metric.

    ``failures`` are runs already known to have failed (the worker's failure events); they
    get their error instead of a value and are left out of the count check. A failure with
    Run (or ConfigId) None covers every run (or config) of its annotation.
    """
    by_key: dict[RunKey, list[KernelRecord]] = {}
    for rec in records:
        by_key.setdefault(rec.key, []).append(rec)
    expected = list(dict.fromkeys(expected_keys))
    runs = {k: _split_ignored(k, by_key.get(k, []), kernels.ignore) for k in expected}
    for run in runs.values():
        run.failure = _failure_for(run.key, failures)

    found: list[Failure] = []
    by_group: dict[tuple[str, int], list[_Run]] = {}
    for run in runs.values():
        by_group.setdefault((run.key.annotation, run.key.config_id), []).append(run)
    for (annotation, config_id), group in by_group.items():
        failure = _group_failure(annotation, config_id, group)
        if failure is None:
            continue
        found.append(failure)
        for run in group:
            run.failure = run.failure or failure

    values = {
        (k, m): _run_value(runs[k], m, kernels, combine_fn) for k in expected for m in metrics
    }
    for v in values.values():
        if v.error_class is not None and not any(f.Error == v.error for f in (*failures, *found)):
            found.append(
                Failure(
                    Annotation=v.key.annotation,
                    ConfigId=v.key.config_id,
                    Run=v.key.run,
                    ErrorClass=v.error_class,
                    Error=v.error or "",
                )
            )
    unexpected = tuple(sorted(k for k in by_key if k not in runs))
    return RunValues(values, tuple(expected), tuple(metrics), tuple(found), unexpected)
