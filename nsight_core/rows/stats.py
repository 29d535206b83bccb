"""Statistics over sequences of floats: Student t, mean intervals, spread, paired ratios.

Pure arithmetic, no project types, no scipy: `aggregate.py` turns per-run values into rows
with these functions, and a comparison of two stored results (Welch) can reuse them.

Why t-intervals and per-run pairs. A profile job has few runs (3 to 10), and the spread is
estimated from those same runs, so the mean's 95 % interval must use Student's t with n-1
degrees of freedom: the normal z = 1.96 that Nsight Python uses understates the half-width
by 2.2x at n = 3 (t = 4.30) and by 1.3x at n = 5 (reference §G.5). A comparison divides
each candidate run by the reference run of the same index, measured in the same job with
the same inputs, so drift that hits both (clocks, temperature, other tenants) cancels in
the ratio, which is tighter and more honest than dividing two independent means.

Why the log scale and the median. A ratio of times lives on (0, inf) and is
symmetric in the log (2x faster and 2x slower are equal distances from 1), so the paired
ratios' interval is the t interval of their logarithms, exponentiated: never below zero, and
a candidate's Ratio is exactly the inverse of its Speedup. The estimate is the median of the
paired ratios, which one outlying run cannot move (a mean of ratios let one call replayed 50x
faster lift an honest 1.3x to about 4x); that same outlier widens the interval instead, so
such a comparison reads unresolved rather than moved. Callers pass finite values only; a
result that is not finite comes back as None, never NaN.

Why a noise floor. Pairing cancels what varies slowly and hits both sides alike, and the
interval holds what varies from run to run; neither sees an effect that is constant within
a job but differs between jobs, such as where the allocator happens to place each
function's temporaries (identical code in one process can differ by tens of percent on a
CPU and keep that difference for many calls: Mytkowicz et al., "Producing wrong data
without doing anything obviously wrong", ASPLOS 2009), so identical code read `Resolvable`
far more often than 1 in 20 (docs/results.md has the A/A counts). Where that effect was
measured, code timed by the host clock on a CPU (rows/aggregate.py `CPU_DEVICE`), a
comparison is resolvable only when its interval lies wholly beyond the job's own
run-to-run spread (`noise_floor`: the pooled standard deviation of both sides' log times,
as a factor): a difference smaller than one run's noise is not acted on. On a GPU the floor
is not asked: it would include drift that pairing cancels (a clock moving under both
sides), and identical code resolves within the 5 % a 95 % interval allows there.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

NS_PER_UNIT: dict[str, float] = {
    "ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3,
    "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9,
}  # fmt: skip
"""Nanoseconds per time unit, under every name ncu's reports and our rows use."""


def ns_per(unit: str | None) -> float | None:
    """Nanoseconds per ``unit`` (case and spaces ignored); None when it is not a time."""
    return NS_PER_UNIT.get((unit or "").strip().lower())


CI_LEVEL = 0.95
"""Two-sided confidence level of every interval: the 95 % of Nsight Python's CI95 columns."""

MIN_RUNS_FOR_CI = 3
"""Fewer values give no CI: at n = 2 (df = 1) t = 12.7, an interval too wide to inform.
DESIGN.md's default of runs >= 3 comes from the same reasoning."""

# --- Student t quantile, without scipy -------------------------------------------------
# t CDF through the regularized incomplete beta function (Abramowitz & Stegun 26.7.1:
# P(T <= t) = 1 - I_x(df/2, 1/2) / 2 with x = df / (df + t^2), for t >= 0), the beta function
# by its continued fraction (A&S 26.5.8) evaluated with the modified Lentz method, and the
# quantile by bisection, which is exact to the tolerance for every df. Checked in
# tests/core/test_stats.py against published t tables (12.706 at df 1, 4.303 at df 2,
# 2.776 at df 4, 2.045 at df 29, 1.962 at df 1000).


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return h


def _regularized_beta(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def student_t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom (df may be fractional)."""
    tail = 0.5 * _regularized_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


@functools.lru_cache(maxsize=256)
def student_t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p; bisection on the CDF, to 1e-12 (cached: few distinct df)."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"need 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p < 0.5:
        return -student_t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while student_t_cdf(hi, df) < p:
        hi *= 2.0
    while hi - lo > 1e-12 * max(1.0, hi):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if student_t_cdf(mid, df) < p else (lo, mid)
    return 0.5 * (lo + hi)


def t_interval(values: Sequence[float], level: float = CI_LEVEL) -> tuple[float, float] | None:
    """Two-sided t interval of the mean of ``values``; None below `MIN_RUNS_FOR_CI` values."""
    n = len(values)
    if n < MIN_RUNS_FOR_CI:
        return None
    mean = statistics.fmean(values)
    half = student_t_quantile(0.5 + level / 2.0, n - 1) * statistics.stdev(values) / math.sqrt(n)
    lo, hi = mean - half, mean + half
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None


# --- descriptive statistics --------------------------------------------------------------


def finite_or_none(x: float | None) -> float | None:
    """``x`` if it is a finite number, else None: what JSON can carry."""
    return x if x is not None and math.isfinite(x) else None


@dataclass(frozen=True)
class Summary:
    """Descriptive statistics of one sample; a field that is undefined or not finite is None."""

    mean: float | None = None
    median: float | None = None
    std: float | None = None
    """Sample standard deviation (n - 1); None below two values."""
    lo: float | None = None
    """Lower end of the mean's t interval at `CI_LEVEL`; None below `MIN_RUNS_FOR_CI` values."""
    hi: float | None = None
    rsd: float | None = None
    """Relative standard deviation in percent of |mean|; None when the mean is 0."""
    min: float | None = None
    max: float | None = None


def summarize(values: Sequence[float]) -> Summary:
    """Mean, median, spread and t interval of finite ``values``; all None when empty."""
    if not values:
        return Summary()
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if len(values) >= 2 else None
    rsd = 100.0 * std / abs(mean) if std is not None and mean != 0 else None
    ci = t_interval(values)
    return Summary(
        mean=finite_or_none(mean),
        median=finite_or_none(statistics.median(values)),
        std=finite_or_none(std),
        lo=None if ci is None else ci[0],
        hi=None if ci is None else ci[1],
        rsd=finite_or_none(rsd),
        min=min(values),
        max=max(values),
    )


# --- paired ratios ----------------------------------------------------------------------


@dataclass(frozen=True)
class PairedRatio:
    """The paired ratios' estimate and interval (the module's docstring says why these)."""

    estimate: float | None
    """Median of the per-pair ratios; None when no pair had a positive numerator and
    denominator."""
    ci: tuple[float, float] | None
    """Exponentiated t interval of the mean log ratio, widened to hold the estimate; None
    below `MIN_RUNS_FOR_CI` ratios."""
    n: int
    """Ratios it is over (pairs with a value at or below zero are left out)."""
    floor: float = 1.0
    """The `noise_floor` the interval must clear to be resolvable; 1.0 where none is asked."""

    @property
    def excludes_one(self) -> bool | None:
        """Whether the interval lies wholly above or below 1; None without one. Identical
        ratios of exactly 1 (a tie) give the interval [1, 1], which holds 1."""
        return self.beyond(1.0)

    @property
    def resolvable(self) -> bool | None:
        """Whether the interval clears the floor (`beyond`); None without an interval."""
        return self.beyond(self.floor)

    def beyond(self, floor: float) -> bool | None:
        """Whether the interval lies wholly above ``floor`` or below ``1 / floor`` (a
        `noise_floor`, >= 1): resolvable. None without an interval."""
        if self.ci is None:
            return None
        lo, hi = self.ci
        return lo > floor or hi < 1.0 / floor


def paired_ratio(
    numerators: Sequence[float],
    denominators: Sequence[float],
    level: float = CI_LEVEL,
    *,
    floored: bool = False,
) -> PairedRatio:
    """numerator[i] / denominator[i] per pair: their median and log-scale interval; with
    ``floored`` (timed on a CPU), the `noise_floor` of both sides that `resolvable` asks."""
    floor = noise_floor(numerators, denominators) if floored else 1.0
    pairs = zip(numerators, denominators, strict=True)
    logs = [math.log(n) - math.log(d) for n, d in pairs if n > 0 and d > 0]
    if not logs:
        return PairedRatio(None, None, 0, floor)
    estimate = math.exp(statistics.median(logs))
    ci = t_interval(logs, level)
    if ci is None:
        return PairedRatio(finite_or_none(estimate), None, len(logs), floor)
    lo, hi = math.exp(ci[0]), math.exp(ci[1])
    interval = (min(lo, estimate), max(hi, estimate))
    if not all(math.isfinite(x) for x in (*interval, estimate)):
        return PairedRatio(finite_or_none(estimate), None, len(logs), floor)
    return PairedRatio(estimate, interval, len(logs), floor)


def noise_floor(*samples: Sequence[float]) -> float:
    """exp of the pooled standard deviation of each sample's logs around its own mean: one
    run's relative noise, as a factor (1.05 for 5 %); 1.0 where no sample has two positive
    values. Pooled over both sides of a comparison, so it has twice the degrees of freedom
    of either (a floor from 5 runs alone is often far below the truth by chance)."""
    ss, df = 0.0, 0
    for sample in samples:
        logs = [math.log(v) for v in sample if v > 0]
        if len(logs) >= 2:
            mean = statistics.fmean(logs)
            ss += sum((x - mean) ** 2 for x in logs)
            df += len(logs) - 1
    floor = math.exp(math.sqrt(ss / df)) if df else 1.0
    return floor if math.isfinite(floor) else 1.0
