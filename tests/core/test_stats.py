"""Student t, mean intervals, summaries and paired ratios, on seeded synthetic samples.

Reference values come from published t tables and from hand arithmetic; the coverage test
draws seeded normal samples, so it is exact and repeatable.
"""

from __future__ import annotations

import math
import random
import statistics

import pytest

from nsight_core.rows.stats import (
    MIN_RUNS_FOR_CI,
    finite_or_none,
    paired_ratio,
    student_t_cdf,
    student_t_quantile,
    summarize,
    t_interval,
)


@pytest.mark.parametrize(
    ("df", "expected"),
    [(1, 12.7062), (2, 4.3027), (4, 2.7764), (9, 2.2622), (29, 2.0452), (1000, 1.9623)],
)
def test_t_quantile_matches_published_table_values(df: int, expected: float) -> None:
    assert student_t_quantile(0.975, df) == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("df", [1.0, 3.5, 12.25, 80.0])
def test_t_cdf_inverts_the_quantile_also_at_fractional_degrees_of_freedom(df: float) -> None:
    # Welch's approximation gives fractional df; the CDF and quantile must agree there too.
    for p in (0.025, 0.5, 0.9, 0.975):
        assert student_t_cdf(student_t_quantile(p, df), df) == pytest.approx(p, abs=1e-9)


def test_t_quantile_refuses_probabilities_outside_the_open_unit_interval() -> None:
    with pytest.raises(ValueError, match="0 < p < 1"):
        student_t_quantile(1.0, 3)


def test_t_interval_at_three_runs_uses_t_not_z() -> None:
    lo, hi = t_interval([10.0, 11.0, 12.0]) or (math.nan, math.nan)
    half = 4.302653 * 1.0 / math.sqrt(3)
    assert (lo, hi) == pytest.approx((11.0 - half, 11.0 + half), abs=1e-5)
    assert hi - lo > 2 * 1.96 / math.sqrt(3) * 2  # more than twice the z-based width


def test_t_interval_covers_the_true_mean_95_percent_of_the_time() -> None:
    rng = random.Random(20261202)
    trials, hits = 4000, 0
    for _ in range(trials):
        ci = t_interval([rng.gauss(100.0, 5.0) for _ in range(4)])
        assert ci is not None
        hits += ci[0] <= 100.0 <= ci[1]
    assert 0.935 <= hits / trials <= 0.965


def test_t_interval_needs_three_values() -> None:
    assert MIN_RUNS_FOR_CI == 3
    assert t_interval([1.0, 2.0]) is None


def test_summary_of_a_sample_matches_hand_arithmetic() -> None:
    s = summarize([100.0, 102.0, 98.0, 101.0, 99.0])
    assert (s.mean, s.median, s.min, s.max) == pytest.approx((100.0, 100.0, 98.0, 102.0))
    assert s.std == pytest.approx(math.sqrt(2.5))  # ddof = 1
    assert s.rsd == pytest.approx(math.sqrt(2.5))
    half = student_t_quantile(0.975, 4) * math.sqrt(2.5) / math.sqrt(5)
    assert (s.lo, s.hi) == pytest.approx((100 - half, 100 + half))


def test_summary_leaves_undefined_statistics_null() -> None:
    empty = summarize([])
    assert empty.mean is None and empty.min is None
    one = summarize([5.0])
    assert one.mean == 5.0 and one.std is None and one.lo is None and one.rsd is None
    zero_mean = summarize([-1.0, 1.0, 0.0])
    assert zero_mean.mean == 0.0 and zero_mean.rsd is None and zero_mean.std == 1.0


def test_finite_or_none_keeps_only_finite_numbers() -> None:
    assert finite_or_none(1.5) == 1.5
    assert finite_or_none(math.inf) is None and finite_or_none(math.nan) is None
    assert finite_or_none(None) is None


def test_paired_ratio_is_the_median_ratio_with_a_log_scale_t_interval() -> None:
    num, den = [10.0, 10.2, 9.8, 10.1], [5.0, 5.1, 4.9, 5.0]
    ratios = [n / d for n, d in zip(num, den, strict=True)]
    pr = paired_ratio(num, den)
    assert pr.n == 4
    assert pr.estimate == pytest.approx(statistics.median(ratios))
    lo, hi = t_interval([math.log(r) for r in ratios])  # type: ignore[misc]
    assert pr.ci == pytest.approx((math.exp(lo), math.exp(hi)))
    assert pr.excludes_one is True
    # The inverse comparison is the exact inverse: Ratio = 1 / Speedup.
    inverse = paired_ratio(den, num)
    assert pr.estimate is not None and inverse.estimate == pytest.approx(1 / pr.estimate)
    assert inverse.ci == pytest.approx((1 / pr.ci[1], 1 / pr.ci[0]))  # type: ignore[index]


def test_one_outlying_run_cannot_move_the_speedup_and_leaves_it_unresolved() -> None:
    """Issue 42: a candidate that makes one timed call of five ~50x faster (an output
    replayed) lifted an honest 1.3x to about 4x as a mean of per-run ratios."""
    ref = [13.0, 13.1, 12.9, 13.0, 13.0]
    honest = [10.0, 10.1, 9.9, 10.0, 10.05]
    gamed = [10.0, 10.1, 9.9, 10.0, 0.2]
    fair, bent = paired_ratio(ref, honest), paired_ratio(ref, gamed)
    assert fair.estimate == pytest.approx(1.3, rel=0.01) and fair.excludes_one is True
    assert bent.estimate == pytest.approx(fair.estimate, rel=0.02)  # the median holds
    assert bent.excludes_one is False  # the outlier widens the interval: not resolvable
    assert statistics.fmean(r / c for r, c in zip(ref, gamed, strict=True)) > 3.9


def test_the_interval_never_goes_below_zero_and_a_tie_is_not_resolvable() -> None:
    wild = paired_ratio([1.0, 90.0, 2.0, 40.0], [1.0, 1.0, 1.0, 1.0])
    assert wild.ci is not None and wild.ci[0] > 0.0
    tie = paired_ratio([5.0, 5.0, 5.0], [5.0, 5.0, 5.0])
    assert tie.estimate == 1.0 and tie.ci == (1.0, 1.0) and tie.excludes_one is False


def test_paired_ratio_leaves_out_non_positive_values_and_says_when_it_cannot_resolve() -> None:
    pr = paired_ratio([1.0, 2.0, 3.0], [0.0, 2.0, 3.0])
    assert pr.n == 2 and pr.estimate == pytest.approx(1.0)
    assert pr.ci is None and pr.excludes_one is None
    assert paired_ratio([1.0], [0.0]).estimate is None
    noisy = paired_ratio([10.5, 9.5, 10.0], [10.0, 11.0, 9.0])
    assert noisy.excludes_one is False


def test_paired_ratio_needs_pairs_of_equal_length() -> None:
    with pytest.raises(ValueError):
        paired_ratio([1.0, 2.0], [1.0])
