"""How a call's kernels fold into one value per run when the request names no reducer.

A call that launches several kernels is one call to its caller: its times and counts (a
`.sum` roll-up) are summed by default, and the row says so; a rate or an average still needs
one kernel per call or a reducer named for it, said before the job runs and refused when
the request asks to sum a rate. Records are built as extraction and the events backend make
them (the recorded two-kernel report is read in tests/core/test_extract.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from nsight_core.collectors.events_samples import EVENTS_LATENCY, records_from_samples
from nsight_core.collectors.extract import KernelRecord
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.host.metric_check import metric_kind
from nsight_core.protocol import EVENTS_METRIC, RunKey, SampleEvent
from nsight_core.request import KernelsSpec
from nsight_core.results import Row
from nsight_core.rows.aggregate import aggregate_rows
from nsight_core.rows.provenance import _combine_notes
from nsight_core.rows.run_values import (
    RunValues,
    combine_note,
    reduce_runs,
    reducer_for,
    refuse_summed_rates,
)
from nsight_core.settings import JobSettings

T = "gpu__time_duration.sum"
BYTES = "dram__bytes.sum"
PCT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
AVG = "sm__cycles_elapsed.avg"

GEMM_KERNELS = ("to_float", "to_float", "gemm", "to_bf16")
"""`(a.float() @ b.float()).to(torch.bfloat16)`: four kernels in every call."""


def runs_of(
    launches: Sequence[Sequence[str]], metrics: Sequence[str] = (T,), value: float = 10.0
) -> tuple[list[KernelRecord], list[RunKey]]:
    """Records of annotation 'ref', config 0: run i launched the kernels ``launches[i]``,
    each ``value`` for every metric (the percentage too), in launch order."""
    records, keys, seq = [], [], 0
    for run, names in enumerate(launches):
        key = RunKey("ref", 0, run)
        keys.append(key)
        for name in names:
            records += [KernelRecord(key, name, name, m, value, "ns", seq) for m in metrics]
            seq += 1
    return records, keys


def folded(
    launches: Sequence[Sequence[str]],
    metrics: Sequence[str] = (T,),
    kernels: KernelsSpec | None = None,
) -> RunValues:
    records, keys = runs_of(launches, metrics)
    return reduce_runs(records, keys, metrics, kernels or KernelsSpec())


def row_of(rows: list[Row], metric: str) -> Row:
    [row] = [r for r in rows if r.Metric == metric]
    return row


@pytest.mark.parametrize(
    ("metric", "kind"),
    [
        (T, "total"),
        (BYTES, "total"),
        ("smsp__inst_executed.sum", "total"),
        ("cupti__time_duration.sum", "total"),
        (PCT, "rate"),
        ("dram__bytes.sum.per_second", "rate"),
        ("sm__inst_executed.avg.per_cycle_active", "rate"),
        ("smsp__average_warp_latency_per_inst_issued.ratio", "rate"),
        ("l1tex__t_sector_hit_rate.pct", "rate"),
        ("sm__inst_executed.sum.peak_sustained", "rate"),
        (AVG, "other"),
        ("sm__cycles_elapsed.max", "other"),
        ("launch__grid_size", "other"),
        ("sum", "other"),
    ],
)
def test_only_sum_rollups_are_totals_and_rates_are_named_by_their_suffix(
    metric: str, kind: str
) -> None:
    assert metric_kind(metric) == kind


def test_a_call_of_four_kernels_is_one_call_whose_times_and_counts_are_summed() -> None:
    rows = aggregate_rows(folded([GEMM_KERNELS] * 3, metrics=(T, BYTES)))
    for metric in (T, BYTES):
        row = row_of(rows, metric)
        assert row.RawValues == [40.0] * 3 and row.ErrorClass is None
        assert row.Kernel == "to_float|to_float|gemm|to_bf16"
        assert any(r.startswith("4 kernels per call, summed") for r in row.Reasons)
        assert row.Trust == "ok"  # a note, not a verdict


def test_one_kernel_per_call_needs_no_note_and_rates_are_fine_then() -> None:
    rows = aggregate_rows(folded([["gemm"]] * 3, metrics=(T, PCT)))
    assert [r.Reasons for r in rows] == [[], []]
    assert row_of(rows, PCT).RawValues == [10.0] * 3


def test_a_rate_of_a_multi_kernel_call_fails_naming_the_reducers_its_time_still_stands() -> None:
    rv = folded([GEMM_KERNELS] * 3, metrics=(T, PCT))
    rows = aggregate_rows(rv)
    assert row_of(rows, T).RawValues == [40.0] * 3
    pct = row_of(rows, PCT)
    assert pct.Trust == "failed" and pct.ErrorClass is ErrorClass.KERNEL_COUNT_MISMATCH
    assert pct.Error is not None and "is a rate" in pct.Error
    assert "kernels.combine" in pct.Error and "'max'" in pct.Error and "gemm" in pct.Error


def test_runs_that_launch_different_counts_still_mismatch_under_the_default() -> None:
    rv = folded([GEMM_KERNELS, GEMM_KERNELS[:3], GEMM_KERNELS])
    [failure] = rv.failures
    assert failure.ErrorClass is ErrorClass.KERNEL_COUNT_MISMATCH
    assert "run 1: 3" in failure.Error
    assert aggregate_rows(rv)[0].Trust == "failed"


def test_a_map_that_leaves_a_metric_out_gives_it_the_default_not_none() -> None:
    spec = KernelsSpec(combine={PCT: "max"})
    assert (reducer_for(spec, T), reducer_for(spec, PCT), reducer_for(spec, AVG)) == (
        "sum",
        "max",
        "none",
    )
    rows = aggregate_rows(folded([GEMM_KERNELS] * 3, metrics=(T, PCT), kernels=spec))
    assert row_of(rows, T).RawValues == [40.0] * 3
    assert row_of(rows, PCT).RawValues == [10.0] * 3 and row_of(rows, PCT).Reasons == []


def test_named_reducers_work_as_before_and_carry_no_default_note() -> None:
    summed = aggregate_rows(folded([GEMM_KERNELS] * 3, kernels=KernelsSpec(combine="sum")))
    assert summed[0].RawValues == [40.0] * 3 and summed[0].Reasons == []
    none = folded([GEMM_KERNELS] * 3, kernels=KernelsSpec(combine="none"))
    assert len(none.failures) == 3  # one per run
    for failure in none.failures:
        assert failure.ErrorClass is ErrorClass.KERNEL_COUNT_MISMATCH
        assert "combine is 'none'" in failure.Error


def test_events_samples_time_the_whole_call_and_fold_as_before() -> None:
    keys = [RunKey("ref", 0, run) for run in range(3)]
    samples = [
        SampleEvent.of(k, m, v)
        for k in keys
        for m, v in ((EVENTS_METRIC, 40), (EVENTS_LATENCY, 55))
    ]
    records = records_from_samples(samples).records
    rv = reduce_runs(records, keys, [EVENTS_METRIC, EVENTS_LATENCY], KernelsSpec())
    assert {v.summed for v in rv.values.values()} == {0}
    rows = aggregate_rows(rv)
    assert [r.RawValues for r in rows] == [[40.0] * 3, [55.0] * 3]
    assert [r.Reasons for r in rows] == [[], []]


def test_summing_a_rate_is_refused_before_the_job_saying_what_to_change() -> None:
    for combine in ("sum", {PCT: "sum"}):
        with pytest.raises(NsightCoreError) as err:
            refuse_summed_rates([T, PCT], KernelsSpec(combine=combine))
        assert err.value.error_class is ErrorClass.INVALID_REQUEST
        assert PCT in err.value.message and "kernels.combine" in err.value.hint
    refuse_summed_rates([T, PCT], KernelsSpec())  # left out: the rate needs one kernel
    refuse_summed_rates([T, PCT], KernelsSpec(combine={T: "sum", PCT: "max"}))
    refuse_summed_rates([AVG], KernelsSpec(combine="sum"))  # an average: the caller's call


def test_the_note_up_front_names_the_metrics_no_reducer_covers() -> None:
    note = combine_note([T, PCT, AVG], KernelsSpec())
    assert note is not None and T not in note
    assert f"{PCT} is a rate" in note and f"{AVG} is not a time or count total" in note
    assert "kernel_count_mismatch" in note and "kernels.combine" in note
    assert combine_note([T, PCT], KernelsSpec(combine={PCT: "mean"})) is None
    assert combine_note([T, BYTES], KernelsSpec()) is None


def test_the_note_rides_on_ncu_results_in_kernel_replay_only() -> None:
    def notes(backend: str, combine: str | None = None, replay: str = "kernel") -> list[str]:
        spec = KernelsSpec(combine=combine, replay_mode=replay)
        return _combine_notes(JobSettings(backend=backend, metrics=(T, PCT), kernels=spec))

    assert len(notes("ncu")) == 1 and PCT in notes("ncu")[0]
    assert notes("ncu", replay="range") == []  # one result per call anyway
    assert notes("ncu", combine="none") == []  # the @kernel API names every reducer
    assert notes("events") == []  # its own metrics, one value per call
