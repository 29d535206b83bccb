"""Reduction, rows, comparisons and trust, driven by seeded synthetic per-run values.

These test arithmetic on small typed records; they do not pretend to be ncu (the recorded
reports in tests/data/ncu/ cover extraction).
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Callable, Sequence

import pytest

from nsight_core.collectors.extract import KernelRecord
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.protocol import RunKey
from nsight_core.request import KernelsSpec
from nsight_core.results import Failure, Row
from nsight_core.rows.aggregate import (
    CPU_DEVICE,
    STABLE_RSD_PCT,
    RowContext,
    RunValues,
    aggregate_rows,
    compare_to_reference,
    lower_is_better,
    normalize_rows,
    reduce_runs,
)
from nsight_core.rows.stats import student_t_quantile, t_interval

T = "gpu__time_duration.sum"
PCT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"


class Recs:
    """Builds records the way extract.py would: one per (launch, metric), seq = launch order."""

    def __init__(self) -> None:
        self.records: list[KernelRecord] = []
        self.keys: list[RunKey] = []
        self._seq = 0

    def run(
        self,
        annotation: str,
        config: int,
        run: int,
        launches: Sequence[tuple[str, dict[str, float]]],
    ) -> Recs:
        key = RunKey(annotation, config, run)
        self.keys.append(key)
        for kernel, values in launches:
            for metric, value in values.items():
                unit = "%" if metric == PCT else "ns"
                self.records.append(
                    KernelRecord(key, kernel, kernel, metric, value, unit, self._seq)
                )
            self._seq += 1
        return self

    def series(
        self, annotation: str, config: int, values: Sequence[float], kernel: str = "k"
    ) -> Recs:
        for run, v in enumerate(values):
            self.run(annotation, config, run, [(kernel, {T: v})])
        return self

    def reduce(
        self,
        metrics: Sequence[str] = (T,),
        kernels: KernelsSpec | None = None,
        failures: Sequence[Failure] = (),
        combine_fn: Callable[[float, float], float] | None = None,
    ) -> RunValues:
        return reduce_runs(
            self.records,
            self.keys,
            metrics,
            kernels or KernelsSpec(),
            failures=failures,
            combine_fn=combine_fn,
        )


def only_row(rows: list[Row], annotation: str | None = None, config: int = 0) -> Row:
    hits = [
        r
        for r in rows
        if (annotation is None or r.Annotation == annotation) and r.ConfigId == config
    ]
    assert len(hits) == 1
    return hits[0]


# --- rows -----------------------------------------------------------------------------------


def test_row_statistics_match_known_values() -> None:
    values = [100.0, 102.0, 98.0, 101.0, 99.0]
    row = only_row(aggregate_rows(Recs().series("a", 0, values).reduce()))
    assert row.AvgValue == pytest.approx(100.0)
    assert row.MedianValue == pytest.approx(100.0)
    assert row.StdDev == pytest.approx(math.sqrt(2.5))  # ddof = 1
    assert (row.MinValue, row.MaxValue) == (98.0, 102.0)
    assert row.NumRuns == row.RequestedRuns == 5
    assert row.RelativeStdDevPct == pytest.approx(math.sqrt(2.5))
    half = student_t_quantile(0.975, 4) * math.sqrt(2.5) / math.sqrt(5)
    assert (row.CI95_Lower, row.CI95_Upper) == pytest.approx((100 - half, 100 + half))
    assert row.StableMeasurement is True
    assert row.Trust == "ok" and row.Reasons == []
    assert row.RawValues == values
    assert row.Unit == "ns" and row.Kernel == "k"


def test_failed_run_is_null_in_raw_values_and_left_out_of_num_runs() -> None:
    recs = Recs().series("a", 0, [10.0, 11.0, 12.0, 13.0])
    failure = Failure(
        Annotation="a", ConfigId=0, Run=1, ErrorClass=ErrorClass.RUNTIME_ERROR, Error="boom"
    )
    row = only_row(aggregate_rows(recs.reduce(failures=[failure])))
    assert row.RawValues == [10.0, None, 12.0, 13.0]
    assert row.NumRuns == 3 and row.RequestedRuns == 4
    assert row.AvgValue == pytest.approx(35.0 / 3)
    assert row.Trust == "suspicious"
    assert row.ErrorClass is ErrorClass.RUNTIME_ERROR


def test_all_runs_failed_gives_failed_row_without_numbers() -> None:
    recs = Recs().series("a", 0, [10.0, 11.0, 12.0])
    failure = Failure(Annotation="a", ErrorClass=ErrorClass.COMPILE_ERROR, Error="syntax")
    row = only_row(aggregate_rows(recs.reduce(failures=[failure])))
    assert row.Trust == "failed"
    assert row.NumRuns == 0
    assert row.AvgValue is None and row.StdDev is None and row.CI95_Lower is None
    assert row.StableMeasurement is None
    assert row.RawValues == [None, None, None]
    assert row.ErrorClass is ErrorClass.COMPILE_ERROR
    assert row.Reasons


def test_fewer_than_three_valid_runs_give_no_ci_and_say_so() -> None:
    row = only_row(aggregate_rows(Recs().series("a", 0, [10.0, 10.1]).reduce()))
    assert row.StdDev is not None
    assert row.CI95_Lower is None and row.CI95_Upper is None
    assert row.Trust == "suspicious" and row.Reasons


def test_spread_above_threshold_is_noisy_and_unstable() -> None:
    rng = random.Random(7)
    values = [rng.gauss(100.0, 10.0) for _ in range(6)]
    row = only_row(aggregate_rows(Recs().series("a", 0, values).reduce()))
    assert row.RelativeStdDevPct is not None and row.RelativeStdDevPct > STABLE_RSD_PCT
    assert row.StableMeasurement is False
    assert row.Trust == "noisy" and row.Reasons


def test_correctness_check_off_marks_rows_suspicious() -> None:
    rows = aggregate_rows(
        Recs().series("a", 0, [10.0, 10.0, 10.01]).reduce(), RowContext(check_enabled=False)
    )
    assert only_row(rows).Trust == "suspicious"


def test_zero_mean_has_null_relative_spread_with_a_reason() -> None:
    row = only_row(aggregate_rows(Recs().series("a", 0, [0.0, 0.0, 0.0]).reduce()))
    assert row.AvgValue == 0.0
    assert row.RelativeStdDevPct is None and row.StableMeasurement is None
    assert row.Trust != "ok" and row.Reasons


def test_rows_are_json_without_nan_even_for_nan_and_missing_values() -> None:
    recs = Recs().series("a", 0, [10.0, math.nan, 12.0])
    rows = aggregate_rows(recs.reduce(metrics=[T, PCT]))
    text = json.dumps([r.model_dump(mode="json") for r in rows], allow_nan=False)
    assert "NaN" not in text
    time_row = next(r for r in rows if r.Metric == T)
    assert time_row.RawValues == [10.0, None, 12.0]
    assert time_row.ErrorClass is ErrorClass.PROFILER_ERROR
    pct_row = next(r for r in rows if r.Metric == PCT)
    assert pct_row.Trust == "failed" and pct_row.ErrorClass is ErrorClass.PROFILER_ERROR


def test_row_context_fills_params_and_provenance() -> None:
    ctx = RowContext(configs=[{"n": 4096}], gpu="NVIDIA H200", cache_control="all",
                     clock_control="none", replay_mode="kernel", requested_runs=3)  # fmt: skip
    row = only_row(aggregate_rows(Recs().series("a", 0, [1.0, 1.0, 1.0]).reduce(), ctx))
    assert row.Params == {"n": 4096} and row.GPU == "NVIDIA H200"
    assert (row.CacheControl, row.ClockControl, row.ReplayMode) == ("all", "none", "kernel")


# --- reduction ------------------------------------------------------------------------------


def test_kernel_count_mismatch_names_expected_and_seen_counts() -> None:
    recs = Recs()
    recs.run("a", 0, 0, [("add_kernel", {T: 1.0})])
    recs.run("a", 0, 1, [("add_kernel", {T: 1.0}), ("scale_kernel", {T: 2.0})])
    recs.run("a", 0, 2, [("add_kernel", {T: 1.0})])
    rv = recs.reduce(kernels=KernelsSpec(combine="sum"))
    [failure] = rv.failures
    assert failure.ErrorClass is ErrorClass.KERNEL_COUNT_MISMATCH
    assert (failure.Annotation, failure.ConfigId, failure.Run) == ("a", 0, None)
    for fragment in ("run 0: 1", "run 1: 2", "run 2: 1", "scale_kernel", "add_kernel"):
        assert fragment in failure.Error
    row = only_row(aggregate_rows(rv))
    assert row.Trust == "failed" and row.ErrorClass is ErrorClass.KERNEL_COUNT_MISMATCH


def test_count_is_checked_per_run_so_configs_never_mix() -> None:
    # Nsight Python's positional chunking turns this into wrong numbers (reference §C.2 a).
    recs = Recs()
    for run in range(3):
        recs.run("a", 0, run, [("k1", {T: 1.0})])
        recs.run("a", 1, run, [("k2", {T: 10.0}), ("k3", {T: 20.0}), ("k4", {T: 30.0})])
    rows = aggregate_rows(recs.reduce(kernels=KernelsSpec(combine="sum")))
    assert only_row(rows, config=0).AvgValue == pytest.approx(1.0)
    assert only_row(rows, config=1).AvgValue == pytest.approx(60.0)
    assert only_row(rows, config=1).Kernel == "k2|k3|k4"


def test_known_failed_run_is_left_out_of_the_count_check() -> None:
    recs = Recs()
    recs.run("boom", 0, 0, [("add", {T: 1.0}), ("add", {T: 1.0})])
    recs.run("boom", 0, 1, [("add", {T: 1.0})])  # raised after one launch
    recs.run("boom", 0, 2, [("add", {T: 1.0}), ("add", {T: 1.0})])
    failure = Failure(
        Annotation="boom", ConfigId=0, Run=1, ErrorClass=ErrorClass.RUNTIME_ERROR, Error="x"
    )
    rv = recs.reduce(kernels=KernelsSpec(combine="sum"), failures=[failure])
    assert all(f.ErrorClass is not ErrorClass.KERNEL_COUNT_MISMATCH for f in rv.failures)
    row = only_row(aggregate_rows(rv))
    assert row.RawValues == [2.0, None, 2.0]
    assert row.ErrorClass is ErrorClass.RUNTIME_ERROR


def test_expected_run_without_kernels_is_no_kernels() -> None:
    recs = Recs().series("a", 0, [1.0, 1.0, 1.0])
    recs.keys += [RunKey("idle", 0, r) for r in range(3)]
    rv = recs.reduce()
    assert [f.ErrorClass for f in rv.failures] == [ErrorClass.NO_KERNELS]
    assert only_row(aggregate_rows(rv), "idle").ErrorClass is ErrorClass.NO_KERNELS
    assert only_row(aggregate_rows(rv), "a").Trust == "ok"


def test_run_without_kernels_that_already_failed_keeps_its_own_class() -> None:
    recs = Recs()
    recs.keys += [RunKey("idle", 0, r) for r in range(3)]
    failure = Failure(Annotation="idle", ErrorClass=ErrorClass.IMPORT_ERROR, Error="no module")
    rv = recs.reduce(failures=[failure])
    assert rv.failures == ()
    assert only_row(aggregate_rows(rv)).ErrorClass is ErrorClass.IMPORT_ERROR


@pytest.mark.parametrize(
    ("reducer", "expected"),
    [("sum", 6.0), ("max", 3.0), ("min", 1.0), ("mean", 2.0), ("first", 3.0), ("last", 2.0)],
)
def test_reducers_fold_kernels_of_one_run_in_launch_order(reducer: str, expected: float) -> None:
    recs = Recs()
    for run in range(3):
        recs.run("a", 0, run, [("k1", {T: 3.0}), ("k2", {T: 1.0}), ("k3", {T: 2.0})])
    row = only_row(aggregate_rows(recs.reduce(kernels=KernelsSpec(combine=reducer))))
    assert row.RawValues == [expected] * 3
    assert row.Kernel == "k1|k2|k3"


def test_a_binary_callable_folds_every_metric_like_nsight_python() -> None:
    """`combine_kernel_metrics=lambda x, y: x + y` (Nsight Python's form) in the @kernel API."""
    recs = Recs()
    for run in range(3):
        recs.run("a", 0, run, [("k1", {T: 1.0, PCT: 50.0}), ("k2", {T: 2.0, PCT: 70.0})])
    rows = aggregate_rows(recs.reduce(metrics=[T, PCT], combine_fn=lambda x, y: x + y))
    assert next(r for r in rows if r.Metric == T).RawValues == [3.0] * 3
    assert next(r for r in rows if r.Metric == PCT).RawValues == [120.0] * 3


def test_a_callable_that_raises_fails_its_runs_with_the_reason() -> None:
    recs = Recs()
    for run in range(3):
        recs.run("a", 0, run, [("k1", {T: 1.0}), ("k2", {T: 2.0})])

    def bad(x: float, y: float) -> float:
        raise ZeroDivisionError("nope")

    rv = recs.reduce(combine_fn=bad)
    row = only_row(aggregate_rows(rv))
    assert row.Trust == "failed" and row.ErrorClass is ErrorClass.RUNTIME_ERROR
    assert any("combine_kernel_metrics raised" in f.Error for f in rv.failures)


def test_reducer_none_with_two_kernels_fails_only_that_metric() -> None:
    recs = Recs()
    for run in range(3):
        recs.run("a", 0, run, [("k1", {T: 1.0, PCT: 50.0}), ("k2", {T: 2.0, PCT: 70.0})])
    spec = KernelsSpec(combine={T: "sum"})
    rows = aggregate_rows(recs.reduce(metrics=[T, PCT], kernels=spec))
    assert next(r for r in rows if r.Metric == T).AvgValue == pytest.approx(3.0)
    pct = next(r for r in rows if r.Metric == PCT)
    assert pct.Trust == "failed" and pct.ErrorClass is ErrorClass.KERNEL_COUNT_MISMATCH


def test_ignore_globs_drop_helper_kernels_and_list_them() -> None:
    recs = Recs()
    for run in range(3):
        recs.run("a", 0, run, [("flush_l2_kernel", {T: 50.0}), ("softmax_kernel", {T: 5.0})])
    rv = recs.reduce(kernels=KernelsSpec(ignore=["flush_*"]))
    row = only_row(aggregate_rows(rv))
    assert row.AvgValue == pytest.approx(5.0)
    assert row.IgnoredKernels == ["flush_l2_kernel"]
    assert row.Kernels == ["softmax_kernel"]


def test_kernels_attributed_to_runs_nobody_asked_for_are_listed() -> None:
    recs = Recs().series("a", 0, [1.0, 1.0, 1.0])
    stray = RunKey("a", 0, 7)
    recs.records.append(KernelRecord(stray, "k", "k", T, 1.0, "ns", 99))
    assert recs.reduce().unexpected_keys == (stray,)


# --- comparisons ----------------------------------------------------------------------------


def test_speedup_is_reference_over_candidate_with_paired_ci() -> None:
    recs = Recs().series("ref", 0, [10.0, 10.2, 9.8, 10.1]).series("cand", 0, [5.0, 5.1, 4.9, 5.0])
    [cmp] = compare_to_reference(recs.reduce(), "ref", ["cand"])
    speedups = [10.0 / 5.0, 10.2 / 5.1, 9.8 / 4.9, 10.1 / 5.0]
    assert cmp.Speedup == pytest.approx(statistics.median(speedups))
    assert cmp.Speedup is not None and cmp.Ratio == pytest.approx(1 / cmp.Speedup)  # inverted
    ci = t_interval([math.log(x) for x in speedups])  # the log scale (stats.py says why)
    assert ci is not None
    lo, hi = cmp.Speedup_CI95_Lower, cmp.Speedup_CI95_Upper
    assert lo is not None and hi is not None
    assert (lo, hi) == pytest.approx((min(math.exp(ci[0]), 2.0), max(math.exp(ci[1]), 2.0)))
    assert cmp.NumPairs == 4 and cmp.Resolvable is True


def test_pairing_cancels_drift_shared_by_reference_and_candidate() -> None:
    drift = [100.0, 140.0, 80.0, 120.0, 90.0]  # e.g. clocks moving between runs
    recs = Recs().series("ref", 0, drift).series("cand", 0, [d * 0.97 for d in drift])
    rows = aggregate_rows(recs.reduce())
    ref_row, cand_row = only_row(rows, "ref"), only_row(rows, "cand")
    assert ref_row.CI95_Lower is not None and cand_row.CI95_Upper is not None
    assert cand_row.CI95_Upper > ref_row.CI95_Lower  # the unpaired intervals overlap
    [cmp] = compare_to_reference(recs.reduce(), "ref", ["cand"])
    assert cmp.Resolvable is True  # the paired one resolves the 3 % difference


def test_on_a_cpu_resolvable_must_clear_the_runs_own_noise() -> None:
    # A 10 % difference the pairs agree on to the percent, between runs that scatter by
    # about 20 %: on a CPU that is within what one function instance can differ from
    # another for a whole job (rows/stats.py), so it is not acted on, and says why.
    drift = [100.0, 140.0, 80.0, 120.0, 90.0]
    recs = Recs().series("ref", 0, drift).series("cand", 0, [d / 1.1 for d in drift[:4]] + [82.5])
    cpu = RowContext(gpu=CPU_DEVICE)
    [on_cpu] = compare_to_reference(recs.reduce(), "ref", ["cand"], ctx=cpu)
    assert on_cpu.Speedup_CI95_Lower is not None and on_cpu.Speedup_CI95_Lower > 1.0
    assert on_cpu.Resolvable is False
    assert any("not the runs' own spread" in r for r in on_cpu.Reasons)
    [on_gpu] = compare_to_reference(recs.reduce(), "ref", ["cand"], ctx=RowContext(gpu="H100"))
    assert on_gpu.Resolvable is True and not on_gpu.Reasons  # pairing cancels the drift
    # Twice as fast clears the same floor.
    fast = Recs().series("ref", 0, drift).series("cand", 0, [d / 2 for d in drift])
    [twice] = compare_to_reference(fast.reduce(), "ref", ["cand"], ctx=cpu)
    assert twice.Resolvable is True


def test_cpu_device_is_the_events_timers_name_for_host_code() -> None:
    from nsight_core.collectors.events import detect_device

    assert detect_device(((1.0,), {})).name == CPU_DEVICE


def test_difference_inside_the_noise_is_not_resolvable() -> None:
    recs = Recs().series("ref", 0, [10.0, 11.0, 9.0]).series("cand", 0, [10.5, 9.5, 10.0])
    [cmp] = compare_to_reference(recs.reduce(), "ref", ["cand"])
    assert cmp.Resolvable is False


def test_speedup_is_null_for_a_metric_that_is_not_a_duration() -> None:
    recs = Recs()
    for run in range(3):
        recs.run("ref", 0, run, [("k", {PCT: 40.0})])
        recs.run("cand", 0, run, [("k", {PCT: 80.0})])
    [cmp] = compare_to_reference(recs.reduce(metrics=[PCT]), "ref", ["cand"])
    assert cmp.Speedup is None and cmp.Resolvable is None
    assert cmp.Ratio == pytest.approx(2.0)
    assert cmp.Reasons


def test_config_without_a_valid_baseline_is_reported_not_dropped() -> None:
    recs = Recs().series("ref", 0, [10.0, 10.0, 10.0]).series("ref", 1, [20.0, 20.0, 20.0])
    recs.series("cand", 0, [5.0, 5.0, 5.0]).series("cand", 1, [9.0, 9.0, 9.0])
    failure = Failure(Annotation="ref", ConfigId=1, ErrorClass=ErrorClass.RUNTIME_ERROR, Error="x")
    cmps = compare_to_reference(recs.reduce(failures=[failure]), "ref", ["cand"])
    assert [c.ConfigId for c in cmps] == [0, 1]
    missing = cmps[1]
    assert missing.NumPairs == 0 and missing.Speedup is None and missing.Ratio is None
    assert missing.Reasons


@pytest.mark.parametrize(
    ("metric", "unit", "expected"),
    [
        ("gpu__time_duration.sum", "ns", True),
        ("sm__cycles_elapsed.max", "cycle", True),
        ("events__time_duration", "ns", True),
        ("gpc__cycles_elapsed.avg.per_second", "cycle/second", False),
        ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "%", False),
        ("dram__bytes.sum", "byte", False),
    ],
)
def test_lower_is_better_means_durations_and_cycle_counts(
    metric: str, unit: str, expected: bool
) -> None:
    assert lower_is_better(metric, unit) is expected


# --- normalisation --------------------------------------------------------------------------


def test_normalize_computes_every_statistic_on_per_run_ratios() -> None:
    ref, cand = [10.0, 20.0, 10.0], [5.0, 12.0, 4.0]
    recs = Recs().series("ref", 0, ref).series("cand", 0, cand)
    rows = normalize_rows(recs.reduce(), "ref")
    base, norm = only_row(rows, "ref"), only_row(rows, "cand")
    ratios = [0.5, 0.6, 0.4]
    assert norm.Unit == "ratio" and norm.Normalized == "ref"
    assert norm.RawValues == pytest.approx(ratios)
    assert norm.AvgValue == pytest.approx(0.5)
    assert norm.StdDev == pytest.approx(0.1)
    assert (norm.MinValue, norm.MaxValue) == pytest.approx((0.4, 0.6))
    ci = t_interval(ratios)
    assert ci is not None and (norm.CI95_Lower, norm.CI95_Upper) == pytest.approx(ci)
    assert base.AvgValue == pytest.approx(1.0) and base.StdDev == pytest.approx(0.0)


def test_normalize_reports_configs_without_a_baseline() -> None:
    recs = Recs().series("ref", 0, [10.0, 10.0, 10.0]).series("cand", 0, [5.0, 5.0, 5.0])
    recs.series("cand", 1, [7.0, 7.0, 7.0])
    recs.keys += [RunKey("ref", 1, r) for r in range(3)]  # ref launched nothing in config 1
    rows = normalize_rows(recs.reduce(), "ref")
    orphan = only_row(rows, "cand", config=1)
    assert orphan.Trust == "failed" and orphan.AvgValue is None
    assert orphan.ErrorClass is ErrorClass.NO_KERNELS
    assert orphan.Reasons and orphan.RawValues == [None, None, None]


def test_normalize_against_an_unknown_annotation_is_an_invalid_request() -> None:
    with pytest.raises(NsightCoreError) as err:
        normalize_rows(Recs().series("a", 0, [1.0, 1.0, 1.0]).reduce(), "nope")
    assert err.value.error_class is ErrorClass.INVALID_REQUEST
