"""From attributed kernel records to per-run values, then to `Row`s and `Comparison`s.

Two stages, each with a typed product:

1. `reduce_runs`: per (run, metric) one value. Kernels are grouped by their `RunKey`
   (identity from the NVTX range, never position), ignore globs drop helper kernels (and
   the dropped names are kept), counts are checked per run, and several kernels of one call
   are folded by a named reducer chosen per metric.
2. `aggregate_rows`, `compare_to_reference`, `normalize_rows`: statistics over runs, grouped
   by (annotation, config_id, metric).

Statistics (Student t, intervals, paired ratios) live in `stats.py`, which explains why
intervals use t and comparisons use per-run pairs. Every statistic is computed from finite
values only: a failed run is null in `RawValues`, leaves `NumRuns`, and is named in
`Reasons`, so no NaN ever reaches JSON.

Size: about 560 lines, over the usual 500, on purpose: reduction, rows, comparisons and
normalisation all work on the same `RunValue` cells and share their private failure
bookkeeping (`_failure_summary`, `_no_baseline_reason`); the arithmetic is in `stats.py`.
"""

from __future__ import annotations

import fnmatch
import functools
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nsight_core.collectors.extract import KernelRecord
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.protocol import RunKey
from nsight_core.request import KernelsSpec, Reducer
from nsight_core.results import Comparison, EvidenceKind, Failure, Row, TrustLevel
from nsight_core.rows.stats import (
    CI_LEVEL,
    MIN_RUNS_FOR_CI,
    NS_PER_UNIT,
    Summary,
    paired_ratio,
    summarize,
)

STABLE_RSD_PCT = 2.0
"""StableMeasurement threshold, kept from Nsight Python (reference §C.7) so the vocabulary of
its agent guide holds. It is a convention, not a derived bound; above it a row is 'noisy'."""

MAX_ERROR_RUNS_LISTED = 8
"""Long count tables are cut here; the failure's message says how many were left out."""

_TIME_UNITS = frozenset({*NS_PER_UNIT, "cycle", "cycles"})

# --- stage 1: per-run values ------------------------------------------------------------


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
    failure: Failure | None = None


def _split_ignored(key: RunKey, records: Sequence[KernelRecord], ignore: Sequence[str]) -> _Run:
    run = _Run(key)
    launches: dict[int, str] = {}
    dropped: dict[int, str] = {}
    for rec in sorted(records, key=lambda r: r.seq):
        if any(fnmatch.fnmatchcase(rec.kernel, pattern) for pattern in ignore):
            dropped[rec.seq] = rec.kernel
        else:
            launches[rec.seq] = rec.kernel
            run.kept.append(rec)
    run.kernels = tuple(launches.values())
    run.ignored = tuple(dropped.values())
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


def _run_value(
    run: _Run, metric: str, reducer: Reducer | Callable[[float, float], float]
) -> RunValue:
    base = RunValue(run.key, metric, None, "", run.kernels, run.ignored)
    if run.failure is not None:
        return _with_error(base, run.failure.ErrorClass, run.failure.Error)
    recs = [r for r in run.kept if r.metric == metric]
    unit = next((r.unit for r in recs if r.unit), "")
    base = RunValue(run.key, metric, None, unit, run.kernels, run.ignored)
    if not callable(reducer) and reducer == "none" and len(recs) > 1:
        return _with_error(
            base,
            ErrorClass.KERNEL_COUNT_MISMATCH,
            f"{run.key.annotation} config {run.key.config_id} run {run.key.run} launched "
            f"{len(recs)} kernels [{', '.join(run.kernels)}] but combine is 'none' for {metric}; "
            "set kernels.combine (e.g. 'sum' for times), ignore helper kernels, "
            "or use replay_mode 'range'",
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
        return RunValue(run.key, metric, folded, unit, run.kernels, run.ignored)
    return RunValue(run.key, metric, _reduce(reducer, values), unit, run.kernels, run.ignored)


def _with_error(v: RunValue, error_class: ErrorClass, message: str) -> RunValue:
    return RunValue(v.key, v.metric, None, v.unit, v.kernels, v.ignored, error_class, message)


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
        (k, m): _run_value(runs[k], m, combine_fn or kernels.reducer_for(m))
        for k in expected
        for m in metrics
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


# --- stage 2: rows ----------------------------------------------------------------------


@dataclass(frozen=True)
class RowContext:
    """What rows need besides the values: the configs, and how the numbers were made."""

    configs: Sequence[Mapping[str, Any]] = ()
    backend: str = "ncu"
    evidence: EvidenceKind = "external"
    gpu: str | None = None
    cache_control: str | None = None
    clock_control: str | None = None
    replay_mode: str | None = None
    check_enabled: bool = True
    requested_runs: int | None = None
    """Runs asked for; default: the number of expected runs of each group."""

    def params(self, config_id: int) -> dict[str, Any]:
        return dict(self.configs[config_id]) if 0 <= config_id < len(self.configs) else {}


def _failure_summary(cells: Sequence[RunValue]) -> tuple[ErrorClass | None, str | None]:
    failed = [c for c in cells if c.value is None and (c.error_class or c.error)]
    if not failed:
        return None, None
    messages: dict[str, list[int]] = {}
    for c in failed:
        messages.setdefault(c.error or "", []).append(c.key.run)
    text = "; ".join(f"runs {runs}: {msg}" for msg, runs in messages.items())
    error_class = next((c.error_class for c in failed if c.error_class), None)
    return error_class, text


def _trust(
    stats: Summary, n: int, requested: int, cells: Sequence[RunValue], ctx: RowContext
) -> tuple[TrustLevel, list[str]]:
    reasons: list[str] = []
    if n == 0:
        return "failed", [f"no valid run out of {requested}"]
    suspicious = False
    if n < requested:
        bad = [c.key.run for c in cells if c.value is None]
        reasons.append(f"{requested - n} of {requested} runs failed (runs {bad})")
        suspicious = True
    if n < MIN_RUNS_FOR_CI:
        reasons.append(f"only {n} valid run(s): no {int(CI_LEVEL * 100)} % CI (needs >= 3)")
        suspicious = True
    if n >= 2 and stats.rsd is None:
        reasons.append("mean is 0: relative spread and stability undefined")
        suspicious = True
    if not ctx.check_enabled:
        reasons.append("correctness check was off: values may come from wrong code")
        suspicious = True
    noisy = stats.rsd is not None and stats.rsd >= STABLE_RSD_PCT
    if noisy:
        reasons.append(
            f"RelativeStdDevPct {stats.rsd:.2f} % >= {STABLE_RSD_PCT} %: interval widened; "
            "add runs to tighten it (comparisons that still resolve stand)"
        )
    if suspicious:
        return "suspicious", reasons
    return ("noisy" if noisy else "ok"), reasons


def _build_row(
    group: GroupKey,
    cells: Sequence[RunValue],
    ctx: RowContext,
    *,
    unit: str | None = None,
    normalized: str | None = None,
) -> Row:
    annotation, config_id, metric = group
    valid = [c.value for c in cells if c.value is not None]
    requested = ctx.requested_runs or len(cells)
    stats = summarize(valid)
    trust, reasons = _trust(stats, len(valid), requested, cells, ctx)
    error_class, error = _failure_summary(cells)
    first_ok = next((c for c in cells if c.value is not None), None)
    seen = list(dict.fromkeys(k for c in cells for k in c.kernels))
    ignored = list(dict.fromkeys(k for c in cells for k in c.ignored))
    row_unit = unit if unit is not None else next((c.unit for c in cells if c.unit), None)
    return Row(
        Annotation=annotation,
        ConfigId=config_id,
        Params=ctx.params(config_id),
        Metric=metric,
        Unit=row_unit,
        AvgValue=stats.mean,
        MedianValue=stats.median,
        StdDev=stats.std,
        MinValue=stats.min,
        MaxValue=stats.max,
        NumRuns=len(valid),
        RequestedRuns=requested,
        RelativeStdDevPct=stats.rsd,
        CI95_Lower=stats.lo,
        CI95_Upper=stats.hi,
        StableMeasurement=None if stats.rsd is None else stats.rsd < STABLE_RSD_PCT,
        Kernel=first_ok.kernel if first_ok else (cells[0].kernel if cells else None),
        Kernels=seen,
        IgnoredKernels=ignored,
        GPU=ctx.gpu,
        Backend=ctx.backend,
        Evidence=ctx.evidence,
        CacheControl=ctx.cache_control,
        ClockControl=ctx.clock_control,
        ReplayMode=ctx.replay_mode,
        Normalized=normalized,
        Trust=trust,
        Reasons=reasons,
        ErrorClass=error_class,
        Error=error,
        RawValues=[c.value for c in cells],
    )


def aggregate_rows(run_values: RunValues, ctx: RowContext | None = None) -> list[Row]:
    """One `Row` per (annotation, config_id, metric), in first-appearance order."""
    ctx = ctx or RowContext()
    return [_build_row(g, cells, ctx) for g, cells in run_values.groups().items()]


# --- stage 2b: comparisons and normalisation ---------------------------------------------


def lower_is_better(metric: str, unit: str | None) -> bool:
    """Durations and cycle counts: smaller is faster. Rates (``per_second``, 'x/y') are not."""
    if "per_second" in metric or (unit is not None and "/" in unit):
        return False
    if unit is not None and unit.strip().lower() in _TIME_UNITS:
        return True
    return "time_duration" in metric or "cycles" in metric


def _pairs(
    cand: Sequence[RunValue], ref: Sequence[RunValue]
) -> tuple[list[tuple[int, float, float]], list[str]]:
    """(run, candidate, reference) for runs where both are valid; reasons for the others."""
    ref_by_run = {c.key.run: c for c in ref}
    pairs: list[tuple[int, float, float]] = []
    reasons: list[str] = []
    for c in cand:
        r = ref_by_run.get(c.key.run)
        if c.value is None or r is None or r.value is None:
            who = "candidate" if c.value is None else "reference"
            reasons.append(f"run {c.key.run} unpaired: {who} failed or missing")
        elif r.value == 0:
            reasons.append(f"run {c.key.run} unpaired: reference value is 0")
        else:
            pairs.append((c.key.run, c.value, r.value))
    return pairs, reasons


def _no_baseline_reason(baseline: str, ref: Sequence[RunValue], config_id: int) -> str:
    error_class, error = _failure_summary(ref)
    if not ref:
        return f"{baseline} has no run for config {config_id}"
    detail = f" ({error_class}: {error})" if error_class else ""
    return f"{baseline} has no valid run for config {config_id}{detail}"


def _comparison(
    cand: Sequence[RunValue],
    ref: Sequence[RunValue],
    group: GroupKey,
    baseline: str,
    params: dict[str, Any],
) -> Comparison:
    annotation, config_id, metric = group
    pairs, reasons = _pairs(cand, ref)
    if not any(r.value is not None for r in ref):
        reasons = [_no_baseline_reason(baseline, ref, config_id)]
    cand_values = [c for _, c, _ in pairs]
    ref_values = [r for _, _, r in pairs]
    unit = next((v.unit for v in (*cand, *ref) if v.unit), None)
    speedup = lo = hi = None
    resolvable = None
    if lower_is_better(metric, unit):
        speedups = paired_ratio(ref_values, cand_values)
        speedup = speedups.mean
        resolvable = speedups.excludes_one
        if speedups.ci is not None:
            lo, hi = speedups.ci
        elif pairs:
            reasons.append(f"{len(pairs)} pair(s): no CI, Resolvable unknown (needs >= 3)")
    else:
        reasons.append(
            f"{metric} ({unit or 'no unit'}) is not a duration: Speedup undefined, use Ratio"
        )
    return Comparison(
        Annotation=annotation,
        Baseline=baseline,
        ConfigId=config_id,
        Params=params,
        Metric=metric,
        Ratio=paired_ratio(cand_values, ref_values).mean,
        Speedup=speedup,
        Speedup_CI95_Lower=lo,
        Speedup_CI95_Upper=hi,
        Resolvable=resolvable,
        NumPairs=len(pairs),
        Reasons=reasons,
    )


def compare_to_reference(
    run_values: RunValues,
    reference: str,
    candidates: Sequence[str],
    *,
    ctx: RowContext | None = None,
) -> list[Comparison]:
    """Each candidate against the reference per config and metric, from per-run pairs.

    A config where the reference has no valid run still gets a Comparison, with null
    numbers and the reason, so nothing disappears from the answer.
    """
    ctx = ctx or RowContext()
    groups = run_values.groups()
    out: list[Comparison] = []
    for cand in candidates:
        for (annotation, config_id, metric), cells in groups.items():
            if annotation != cand:
                continue
            ref = groups.get((reference, config_id, metric), [])
            out.append(
                _comparison(cells, ref, (cand, config_id, metric), reference, ctx.params(config_id))
            )
    return out


def _ratio_cell(c: RunValue, b: RunValue | None, baseline: str) -> RunValue:
    if c.value is None:
        return RunValue(
            c.key, c.metric, None, "ratio", c.kernels, c.ignored, c.error_class, c.error
        )
    if b is None or b.value is None or b.value == 0:
        why = "is 0" if b is not None and b.value == 0 else "failed or is missing"
        return RunValue(
            c.key,
            c.metric,
            None,
            "ratio",
            c.kernels,
            c.ignored,
            b.error_class if b is not None else None,
            f"baseline {baseline} run {c.key.run} {why}",
        )
    return RunValue(c.key, c.metric, c.value / b.value, "ratio", c.kernels, c.ignored)


def normalize_rows(
    run_values: RunValues, baseline: str, ctx: RowContext | None = None
) -> list[Row]:
    """Rows of per-run ratios value / baseline value (same config, metric and run index).

    Unit is 'ratio' and every statistic (spread, CI, min/max) is computed on the ratios, so
    nothing stays in absolute units. A config without a valid baseline run gives rows with
    null values and the reason, instead of being dropped. The baseline's own rows are 1.0.
    """
    ctx = ctx or RowContext()
    groups = run_values.groups()
    known = sorted({a for a, _, _ in groups})
    if baseline not in known:
        raise NsightCoreError(
            ErrorClass.INVALID_REQUEST,
            f"normalize baseline {baseline!r} is not one of the annotations {known}",
            "name the reference or one of the candidates",
        )
    rows: list[Row] = []
    for (annotation, config_id, metric), cells in groups.items():
        base = groups.get((baseline, config_id, metric), [])
        base_by_run = {b.key.run: b for b in base}
        ratio_cells = [_ratio_cell(c, base_by_run.get(c.key.run), baseline) for c in cells]
        row = _build_row(
            (annotation, config_id, metric), ratio_cells, ctx, unit="ratio", normalized=baseline
        )
        if not any(b.value is not None for b in base):
            row.Reasons.insert(0, _no_baseline_reason(baseline, base, config_id))
        rows.append(row)
    return rows
