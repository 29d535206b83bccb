"""From per-run values to `Row`s and `Comparison`s: the statistics over runs.

Two stages, each with a typed product:

1. `reduce_runs` (`rows.run_values`): per (run, metric) one value. Kernels are grouped by
   their `RunKey` (identity from the NVTX range, never position), ignore globs drop helper
   kernels (and the dropped names are kept), counts are checked per run, and several
   kernels of one call are folded by a reducer chosen per metric (the request's, else `sum`
   for a time or count and one kernel per call for anything else).
2. `aggregate_rows`, `compare_to_reference`, `normalize_rows` (here): statistics over runs,
   grouped by (annotation, config_id, metric).

Statistics (Student t, intervals, paired ratios) live in `stats.py`, which explains why
intervals use t and comparisons use per-run pairs. Every statistic is computed from finite
values only: a failed run is null in `RawValues`, leaves `NumRuns`, and is named in
`Reasons`, so no NaN ever reaches JSON. ``__all__`` keeps the names callers import from
here, stage 1's included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from nsight_core.collectors.kernel_sets import kernel_set_finding
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.results import Comparison, EvidenceKind, Row, TrustLevel
from nsight_core.rows.run_values import GroupKey, RunValue, RunValues, reduce_runs
from nsight_core.rows.stats import (
    CI_LEVEL,
    MIN_RUNS_FOR_CI,
    NS_PER_UNIT,
    Summary,
    paired_ratio,
    summarize,
)

__all__ = [
    "CPU_DEVICE",
    "STABLE_RSD_PCT",
    "GroupKey",
    "RowContext",
    "RunValue",
    "RunValues",
    "aggregate_rows",
    "compare_to_reference",
    "lower_is_better",
    "normalize_rows",
    "reduce_runs",
]

STABLE_RSD_PCT = 2.0
"""StableMeasurement threshold, kept from Nsight Python (reference §C.7) so the vocabulary of
its agent guide holds. It is a convention, not a derived bound; above it a row is 'noisy'."""

_TIME_UNITS = frozenset({*NS_PER_UNIT, "cycle", "cycles"})

CPU_DEVICE = "cpu"
"""The device name of code timed by the host clock on CPU arrays (collectors/events.py
`detect_device`): where a comparison's Resolvable must clear the noise floor (rows/stats.py
says why; on a GPU the A/A tests resolve within 5 % without it)."""

DEFAULT_SUM = "kernels.combine's default for a time or count; name a reducer to change it"
"""Why a row's value is the sum of each call's kernels: a note, not a verdict (Trust is
unchanged), so a reader of the row knows one call was several kernels."""


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
    found = kernel_set_finding([(c.key.run, c.kernel_set) for c in cells if c.value is not None])
    if found is not None:
        reasons.append(found.reason)
        suspicious = suspicious or found.suspicious
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
    summed = max((c.summed for c in cells if c.value is not None), default=0)
    if summed:
        reasons.append(f"{summed} kernels per call, summed ({DEFAULT_SUM})")
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
    on_cpu: bool,
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
        speedups = paired_ratio(ref_values, cand_values, floored=on_cpu)
        speedup = speedups.estimate
        resolvable = speedups.resolvable
        if speedups.ci is not None:
            lo, hi = speedups.ci
            if speedups.excludes_one and not resolvable:
                reasons.append(
                    f"the interval excludes 1.0 but not the runs' own spread "
                    f"(x{speedups.floor:.3f}, one run's noise): not resolvable"
                )
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
        Ratio=paired_ratio(cand_values, ref_values).estimate,
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
                _comparison(
                    cells,
                    ref,
                    (cand, config_id, metric),
                    reference,
                    ctx.params(config_id),
                    on_cpu=ctx.gpu == CPU_DEVICE,
                )
            )
    return out


def _ratio_cell(c: RunValue, b: RunValue | None, baseline: str) -> RunValue:
    if c.value is None:
        return replace(c, unit="ratio", summed=0)
    if b is None or b.value is None or b.value == 0:
        why = "is 0" if b is not None and b.value == 0 else "failed or is missing"
        return replace(
            c,
            value=None,
            unit="ratio",
            error_class=b.error_class if b is not None else None,
            error=f"baseline {baseline} run {c.key.run} {why}",
            summed=0,
        )
    return replace(c, value=c.value / b.value, unit="ratio")


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
