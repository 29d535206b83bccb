"""Timer cross-check: one candidate and config measured by two backends in one result.

Today that is a staged request (stages.py): the screen times every call inside the
candidate's process (cupti or events), then the profile stage measures the reference and
the kept candidates under ncu. `cross_check` runs after the profile stage, over the two
stages' results, and:

- sets `CrossCheck` on each profile-stage time row (the screen's median of the same
  annotation and config) and on each profile-stage comparison (the screen's Speedup);
- flags, in `Reasons`, disagreement beyond the bounds below. A flag on a profile-stage row
  is a note (ncu measures outside the process: its number stands, Trust unchanged); a
  screen row whose kernel time ncu contradicts becomes `suspicious`.

Rules (docs/stages.md, "Cross-check", has the same table):

1. ranking disagreement: the screen's and the profile stage's Speedup of a candidate on a
   config lie on opposite sides of 1.0 and both are Resolvable (95 % intervals exclude 1.0).
   Flagged on the candidate's profile time row and comparison.
2. cupti well below ncu (screen metric `cupti__time_duration.sum` against
   `gpu__time_duration.sum`, kernel time against kernel time): the screen's median more than
   `KERNEL_TIME_BELOW_PCT` % plus `KERNEL_TIME_SLACK_NS` below ncu's: honest kernels read
   a little below ncu (its duration carries a little more per kernel; docs/stages.md has the
   measured spread). Higher cupti times are not flagged: contention and clocks make them honest.
3. host-bound calls (cupti screen): the screen's latency far above its kernel time
   (`collectors.cupti_samples.host_bound_reason`): the note goes onto the profile stage's
   time row too, since ncu's kernel time alone understates what a caller pays.
4. screen overrated (any screen): the screen's Speedup of a candidate lies above the
   profile stage's beyond the noise of both: the screen's 95 % interval starts above the
   profile stage's interval's end times (1 + `OVERRATED_FLOOR_PCT` / 100). Speedups, not raw
   times, are compared: the reference is measured in both stages, so each timer's own
   offsets (the launch path in events, cupti's and ncu's different ends of a kernel) divide
   out, and one rule serves both screens. The floor is the gap honest timers leave between
   two kernels' ratios (docs/stages.md). The candidate's time rows in both stages become
   `suspicious` (it ran differently under the two timers, beyond the noise: the screen
   promoted it, and a candidate that can tell the timers apart can game either), and the
   stage runner profiles the next-ranked candidate in its place (`CrossChecked.overrated`).

Pure functions over result models; the metric names come from the caller (the backends'
`default_metric`), so no backend name is compared here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from nsight_core.collectors.cupti_samples import (
    CUPTI_DURATION,
    CUPTI_LATENCY,
    CUPTI_SPAN,
    host_bound_reason,
)
from nsight_core.request import DEFAULT_METRIC
from nsight_core.results import (
    Comparison,
    CrossCheckValue,
    ProfileResult,
    Row,
    marked,
    suspected,
)
from nsight_core.rows.stats import ns_per

KERNEL_TIME_BELOW_PCT = 25.0
"""cupti's kernel time may lie this far below ncu's before it is flagged (percent of ncu's)..."""
KERNEL_TIME_SLACK_NS = 2_000.0
"""... plus this absolute slack (2 us), so short kernels' fixed offsets do not trip it."""

OVERRATED_FLOOR_PCT = 20.0
"""Rule 4: how far the screen's Speedup interval may lie above the profile stage's, beyond
the noise, before it is flagged (percent of the profile stage's upper bound)."""

Key = tuple[str, int]
"""(annotation, config id)."""


@dataclass(frozen=True)
class CrossChecked:
    """The two stages' results after the cross-check, and one line per flag for the message."""

    screen: ProfileResult
    final: ProfileResult
    flags: list[str]
    overrated: dict[str, str] = field(default_factory=dict)
    """Rule 4: candidate -> the first reason, for each candidate the screen overrated."""


def to_ns(value: float | None, unit: str | None) -> float | None:
    """A duration in ns; None when the unit is not a time unit (or the value is missing)."""
    if value is None or unit is None:
        return None
    scale = ns_per(unit)
    return None if scale is None else value * scale


def deviation_pct(other: float | None, this: float | None) -> float | None:
    """100 * (other - this) / this; None when undefined."""
    if other is None or this is None or this == 0:
        return None
    return round(100.0 * (other - this) / this, 2)


def ranking_disagreement(screen: Comparison, final: Comparison) -> str | None:
    """Rule 1: the Reason when the two Speedups resolve in opposite directions, else None."""
    s, f = screen.Speedup, final.Speedup
    if s is None or f is None or screen.Resolvable is not True or final.Resolvable is not True:
        return None
    if (s > 1.0) == (f > 1.0):
        return None
    return (
        f"ranking disagreement: the screen ({screen.Metric}) gave {s:.3g}x the reference's "
        f"speed {_interval(screen)}, the profile stage ({final.Metric}) {f:.3g}x "
        f"{_interval(final)}; both resolve, in opposite directions. Report the profile "
        "stage's number for kernel time. Where the screen timed the whole call (events), a "
        "launch-bound candidate loses there and wins on kernel time: what a caller pays is "
        "the screen's side. Where both timed kernels (cupti, ncu), the candidate ran "
        "differently under the two: check that it does the same work on every call"
    )


def screen_overrated(screen: Comparison, final: Comparison) -> str | None:
    """Rule 4: the Reason when the screen's Speedup lies above the profile stage's beyond
    the noise of both and the floor, else None (also when either has no interval)."""
    s_lo, f_hi = screen.Speedup_CI95_Lower, final.Speedup_CI95_Upper
    s, f = screen.Speedup, final.Speedup
    if s_lo is None or f_hi is None or s is None or f is None:
        return None
    bound = f_hi * (1.0 + OVERRATED_FLOOR_PCT / 100.0)
    if s_lo <= bound:
        return None
    return (
        f"screen overrated: the screen ({screen.Metric}) gave {s:.3g}x the reference's speed "
        f"{_interval(screen)}, the profile stage ({final.Metric}) {f:.3g}x {_interval(final)}: "
        f"the screen's interval starts above the profile stage's end plus "
        f"{OVERRATED_FLOOR_PCT:g} % (the gap honest timers leave), so the candidate ran "
        "differently under the two timers. The screen's number put it in the top k: the "
        "next-ranked candidate is profiled in its place where the budget allows (the profile "
        "stage's Reason says). Do not act on its numbers; check that it does the same work on "
        "every call, whoever times it"
    )


def kernel_time_below(screen: Row, final: Row) -> str | None:
    """Rule 2: the Reason when cupti's median kernel time is far below ncu's, else None."""
    if screen.Metric != CUPTI_DURATION or final.Metric != DEFAULT_METRIC:
        return None
    c = to_ns(screen.MedianValue, screen.Unit)
    n = to_ns(final.MedianValue, final.Unit)
    if c is None or n is None or n <= 0:
        return None
    if n - c <= n * KERNEL_TIME_BELOW_PCT / 100.0 + KERNEL_TIME_SLACK_NS:
        return None
    clocks = (
        " ncu ran with clock_control='base' (clocks locked below boost), which explains some "
        "of it: profile with clock_control='none' to compare."
        if final.ClockControl == "base"
        else ""
    )
    return (
        f"cupti below ncu: the screen's kernel time ({CUPTI_DURATION}, median "
        f"{c / 1e3:.3g} us) is {100.0 * (n - c) / n:.0f} % below ncu's {DEFAULT_METRIC} "
        f"({n / 1e3:.3g} us), beyond the cross-check's bound ({KERNEL_TIME_BELOW_PCT:g} % + "
        f"{KERNEL_TIME_SLACK_NS / 1e3:g} us; honest kernels differ by under 10 %): the "
        "candidate's kernels did less work in the screen than under ncu (a code path that "
        f"depends on the profiler, results cached between calls).{clocks} Report ncu's "
        "number; check that the candidate does the same work on every call"
    )


def _interval(c: Comparison) -> str:
    lo, hi = c.Speedup_CI95_Lower, c.Speedup_CI95_Upper
    return f"[{lo:.3g}, {hi:.3g}]" if lo is not None and hi is not None else "[no CI]"


def _by_key(rows: Sequence[Row], metric: str) -> dict[Key, Row]:
    return {(r.Annotation, r.ConfigId): r for r in rows if r.Metric == metric}


def cross_check(
    screen: ProfileResult, final: ProfileResult, *, screen_metric: str, final_metric: str
) -> CrossChecked:
    """Both stages' results with `CrossCheck` values and disagreement Reasons (rules above).

    `screen_metric` and `final_metric` are the two backends' time metrics (their
    `default_metric`); a profile stage whose request left `final_metric` out gets no row
    cross-check, only the comparisons' (which need it too, so then none at all).
    """
    s_rows = _by_key(screen.rows, screen_metric)
    s_latency = _by_key(screen.rows, CUPTI_LATENCY)
    s_span = _by_key(screen.rows, CUPTI_SPAN)
    s_comp = {
        (c.Annotation, c.ConfigId): c for c in screen.comparisons if c.Metric == screen_metric
    }
    flags: list[str] = []
    doubted: dict[Key, str] = {}

    compared = _compare(
        final.comparisons, s_comp, _backend_of(screen.rows, screen_metric), final_metric
    )
    flags += compared.flags
    disagree, over_keys = compared.disagree, compared.overrated

    rows: list[Row] = []
    for r in final.rows:
        key = (r.Annotation, r.ConfigId)
        other_row = s_rows.get(key)
        if r.Metric != final_metric or other_row is None:
            rows.append(r)
            continue
        this_ns = to_ns(r.MedianValue, r.Unit)
        other_ns = to_ns(other_row.MedianValue, other_row.Unit)
        r = r.model_copy(
            update={
                "CrossCheck": CrossCheckValue(
                    Backend=other_row.Backend,
                    Metric=other_row.Metric,
                    Value=other_ns,
                    DeviationPct=deviation_pct(other_ns, this_ns),
                )
            }
        )
        if key in disagree:
            r = marked(r, disagree[key])
        if key in over_keys:
            r = suspected(r, over_keys[key])
        below = kernel_time_below(other_row, r)
        if below is not None:
            r = marked(r, below)
            doubted[key] = below
            flags.append(f"cupti below ncu on {r.Annotation} config {r.ConfigId}")
        device = other_row.MedianValue if other_row.Metric == CUPTI_DURATION else None
        if device is None and key in s_span:
            device = s_span[key].MedianValue
        latency = s_latency.get(key)
        host = host_bound_reason(device, latency.MedianValue if latency is not None else None)
        if host is not None:
            r = marked(r, host)
        rows.append(r)

    screen_rows = [_doubted(r, screen_metric, doubted, over_keys) for r in screen.rows]
    overrated: dict[str, str] = {}
    for (annotation, _), reason in over_keys.items():
        overrated.setdefault(annotation, reason)
    return CrossChecked(
        screen=screen.model_copy(update={"rows": screen_rows}),
        final=final.model_copy(update={"rows": rows, "comparisons": compared.comparisons}),
        flags=flags,
        overrated=overrated,
    )


@dataclass(frozen=True)
class _Compared:
    """The profile stage's comparisons after rules 1 and 4, and what they flagged by key."""

    comparisons: list[Comparison]
    disagree: dict[Key, str]
    overrated: dict[Key, str]
    flags: list[str]


def _compare(
    comparisons: Sequence[Comparison],
    screen: dict[Key, Comparison],
    screen_backend: str,
    final_metric: str,
) -> _Compared:
    """Each profile comparison with the screen's Speedup beside it, and rules 1 and 4."""
    out: list[Comparison] = []
    disagree: dict[Key, str] = {}
    overrated: dict[Key, str] = {}
    flags: list[str] = []
    for c in comparisons:
        key = (c.Annotation, c.ConfigId)
        other = screen.get(key)
        if c.Metric != final_metric or other is None:
            out.append(c)
            continue
        value = CrossCheckValue(
            Backend=screen_backend,
            Metric=other.Metric,
            Value=other.Speedup,
            DeviationPct=deviation_pct(other.Speedup, c.Speedup),
        )
        reasons = list(c.Reasons)
        reason = ranking_disagreement(other, c)
        if reason is not None:
            disagree[key] = reason
            reasons.append(reason)
            flags.append(f"ranking disagreement on {c.Annotation} config {c.ConfigId}")
        over = screen_overrated(other, c)
        if over is not None:
            overrated[key] = over
            reasons.append(over)
            flags.append(f"screen overrated {c.Annotation} on config {c.ConfigId}")
        out.append(c.model_copy(update={"CrossCheck": value, "Reasons": reasons}))
    return _Compared(out, disagree, overrated, flags)


def _doubted(row: Row, metric: str, *doubts: dict[Key, str]) -> Row:
    """A screen row with every doubt the rules raised on its annotation and config."""
    if row.Metric != metric:
        return row
    for doubt in doubts:
        reason = doubt.get((row.Annotation, row.ConfigId))
        if reason is not None:
            row = suspected(row, reason)
    return row


def _backend_of(rows: Sequence[Row], metric: str) -> str:
    return next((r.Backend for r in rows if r.Metric == metric), "screen")
