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


def test_paired_ratio_averages_per_pair_ratios_with_their_t_interval() -> None:
    num, den = [10.0, 10.2, 9.8, 10.1], [5.0, 5.1, 4.9, 5.0]
    ratios = [n / d for n, d in zip(num, den, strict=True)]
    pr = paired_ratio(num, den)
    assert pr.n == 4
    assert pr.mean == pytest.approx(statistics.fmean(ratios))
    assert pr.ci == pytest.approx(t_interval(ratios))
    assert pr.excludes_one is True


def test_paired_ratio_leaves_out_zero_denominators_and_says_when_it_cannot_resolve() -> None:
    pr = paired_ratio([1.0, 2.0, 3.0], [0.0, 2.0, 3.0])
    assert pr.n == 2 and pr.mean == pytest.approx(1.0)
    assert pr.ci is None and pr.excludes_one is None
    assert paired_ratio([1.0], [0.0]).mean is None
    noisy = paired_ratio([10.5, 9.5, 10.0], [10.0, 11.0, 9.0])
    assert noisy.excludes_one is False


def test_paired_ratio_needs_pairs_of_equal_length() -> None:
    with pytest.raises(ValueError):
        paired_ratio([1.0, 2.0], [1.0])
