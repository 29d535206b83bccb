"""The timer cross-check's rules on rows and comparisons built by the real aggregation.

The screen's rows come from cupti samples as the judge sends them (`call_samples` ->
`CuptiBackend.read_records` -> `reduce_runs` -> `aggregate_rows`, then `flag_host_bound`
as assemble.py applies it); the profile stage's from per-kernel records as extract.py
reads them from an ncu report (unit 'nsecond'). The values are synthetic: anchored on the
H200 measurements the bounds are chosen from (docs/stages.md, "Cross-check"). The staged
job end to end (events screen, events profile stage) is in test_stages.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from nsight_core.collectors.base import Wrapped
from nsight_core.collectors.cupti import CUPTI
from nsight_core.collectors.cupti_records import KernelSpan
from nsight_core.collectors.cupti_samples import (
    CUPTI_DURATION,
    CUPTI_LATENCY,
    CUPTI_SPAN,
    HOST_BOUND_MIN_NS,
    HOST_BOUND_RATIO,
    call_samples,
    flag_host_bound,
    host_bound_reason,
)
from nsight_core.collectors.extract import KernelRecord
from nsight_core.protocol import EVENTS_METRIC, RunKey, SampleEvent
from nsight_core.request import DEFAULT_METRIC, KernelsSpec
from nsight_core.results import Comparison, ProfileResult, Row, StageName
from nsight_core.rows.aggregate import RowContext, aggregate_rows, compare_to_reference, reduce_runs
from nsight_core.rows.crosscheck import (
    KERNEL_TIME_BELOW_PCT,
    KERNEL_TIME_SLACK_NS,
    OVERRATED_FLOOR_PCT,
    CrossChecked,
    cross_check,
    kernel_time_below,
    screen_overrated,
)
from nsight_core.settings import JobSettings

REF, CAND = "ref.py:softmax", "v2.py:softmax"
Times = Mapping[str, Sequence[float]]
"""annotation -> one value (ns) per run, config 0."""


def _result(
    rows: list[Row], comparisons: list[Comparison], stage: StageName, rid: str
) -> ProfileResult:
    mark = {"Stage": stage}
    return ProfileResult(
        result_id=rid,
        status="done",
        created_at="now",
        rows=[r.model_copy(update=mark) for r in rows],
        comparisons=[c.model_copy(update=mark) for c in comparisons],
    )


def cupti_screen(kernel: Times, latency: Times) -> ProfileResult:
    """A cupti screen job's rows and comparisons: one kernel per call, L2 flushed."""
    samples: list[SampleEvent] = []
    keys: list[RunKey] = []
    for ann, durations in kernel.items():
        for run, dur in enumerate(durations):
            key = RunKey(ann, 0, run)
            keys.append(key)
            k = KernelSpan("softmax_kernel", 1_000, 1_000 + int(dur), 7)
            samples += call_samples(key, latency[ann][run], [k])
    spec = KernelsSpec()
    got = CUPTI.read_records(Wrapped([]), samples, _cupti_settings(spec))
    values = reduce_runs(got.records, keys, got.metrics, spec)
    ctx = RowContext(backend="cupti", evidence="in_process")
    rows = flag_host_bound(aggregate_rows(values, ctx))
    comparisons = compare_to_reference(values, REF, [a for a in kernel if a != REF], ctx=ctx)
    return _result(rows, comparisons, "screen", "screen")


def _cupti_settings(spec: KernelsSpec) -> JobSettings:
    return JobSettings(backend="cupti", metrics=(CUPTI_DURATION,), kernels=spec, runs=3)


def ncu_profile(
    times: Times, clock_control: str = "none", metric: str = DEFAULT_METRIC
) -> ProfileResult:
    """A profile stage's rows as extract.py reads them from an ncu report."""
    records: list[KernelRecord] = []
    keys: list[RunKey] = []
    seq = 0
    for ann, values in times.items():
        for run, v in enumerate(values):
            key = RunKey(ann, 0, run)
            keys.append(key)
            records.append(KernelRecord(key, "k", "k", metric, v, "nsecond", seq))
            seq += 1
    values_ = reduce_runs(records, keys, [metric], KernelsSpec())
    ctx = RowContext(backend="ncu", clock_control=clock_control)
    rows = aggregate_rows(values_, ctx)
    comparisons = compare_to_reference(values_, REF, [a for a in times if a != REF], ctx=ctx)
    return _result(rows, comparisons, "profile", "profile")


def check(screen: ProfileResult, final: ProfileResult) -> CrossChecked:
    return cross_check(screen, final, screen_metric=CUPTI_DURATION, final_metric=DEFAULT_METRIC)


def row(result: ProfileResult, ann: str, metric: str) -> Row:
    hits = [r for r in result.rows if r.Annotation == ann and r.Metric == metric]
    assert len(hits) == 1
    return hits[0]


def comparison(result: ProfileResult, ann: str, metric: str) -> Comparison:
    hits = [c for c in result.comparisons if c.Annotation == ann and c.Metric == metric]
    assert len(hits) == 1
    return hits[0]


def short_calls(*kernels: str) -> Times:
    """Latencies that are not host-bound for any of the given annotations."""
    return {a: [40_000.0] * 3 for a in kernels}


# -- honest kernels: both numbers reported, nothing flagged ----------------------------------


def test_honest_kernels_get_both_numbers_and_no_reason() -> None:
    # The H200's softmax sweep, 4096x4096: ncu torch 55.0 us, Triton 31.4 us; cupti 8.0 %
    # and 5.5 % below (ncu's duration carries about 1 us more).
    ncu = {REF: [55_000.0, 55_100.0, 54_900.0], CAND: [31_400.0, 31_500.0, 31_300.0]}
    cupti = {REF: [50_600.0, 50_700.0, 50_500.0], CAND: [29_670.0, 29_700.0, 29_650.0]}
    lat = {REF: [116_000.0] * 3, CAND: [140_000.0] * 3}
    out = check(cupti_screen(cupti, lat), ncu_profile(ncu))
    assert out.flags == []
    ref = row(out.final, REF, DEFAULT_METRIC)
    assert ref.CrossCheck is not None
    assert (ref.CrossCheck.Backend, ref.CrossCheck.Metric) == ("cupti", CUPTI_DURATION)
    assert ref.CrossCheck.Value == pytest.approx(50_600.0)
    assert ref.CrossCheck.DeviationPct == pytest.approx(-8.0, abs=0.01)
    assert ref.Reasons == [] and ref.Trust == "ok"
    cand = comparison(out.final, CAND, DEFAULT_METRIC)
    assert cand.CrossCheck is not None and cand.CrossCheck.Value is not None
    assert cand.Speedup is not None and cand.Speedup > 1 and cand.CrossCheck.Value > 1
    assert cand.Reasons == []
    assert all(r.Trust == "ok" for r in out.screen.rows)
    # Only the time rows carry the cross-check: the screen's own rows do not.
    assert all(r.CrossCheck is None for r in out.screen.rows)


# -- rule 1: ranking disagreement ------------------------------------------------------------


def test_speedups_resolved_in_opposite_directions_are_flagged_on_the_candidates_ncu_rows() -> None:
    ncu = {REF: [11_900.0, 12_000.0, 11_950.0], CAND: [10_000.0, 10_050.0, 9_980.0]}
    cupti = {REF: [11_000.0, 11_050.0, 10_980.0], CAND: [13_000.0, 13_100.0, 12_950.0]}
    out = check(cupti_screen(cupti, short_calls(REF, CAND)), ncu_profile(ncu))
    reason = "ranking disagreement"
    cand_row = row(out.final, CAND, DEFAULT_METRIC)
    assert any(reason in r for r in cand_row.Reasons), cand_row.Reasons
    assert cand_row.Trust == "ok", "ncu measured outside the process: its number stands"
    comp = comparison(out.final, CAND, DEFAULT_METRIC)
    text = next(r for r in comp.Reasons if reason in r)
    assert "1.19x" in text and "0.846x" in text and "opposite directions" in text
    assert comp.CrossCheck is not None and comp.CrossCheck.Value == pytest.approx(0.846, abs=1e-3)
    assert not any(reason in r for r in row(out.final, REF, DEFAULT_METRIC).Reasons)
    assert out.flags == [f"ranking disagreement on {CAND} config 0"]


@pytest.mark.parametrize(
    ("cand_screen", "why"),
    [
        ([11_500.0, 11_000.0, 10_600.0], "the screen's speedup does not resolve"),
        ([10_500.0, 10_550.0, 10_480.0], "both faster"),
    ],
)
def test_no_ranking_flag_when_one_side_is_within_noise_or_both_agree(
    cand_screen: list[float], why: str
) -> None:
    ncu = {REF: [11_900.0, 12_000.0, 11_950.0], CAND: [10_000.0, 10_050.0, 9_980.0]}
    cupti = {REF: [11_000.0, 11_050.0, 10_980.0], CAND: cand_screen}
    out = check(cupti_screen(cupti, short_calls(REF, CAND)), ncu_profile(ncu))
    assert out.flags == [], why
    assert comparison(out.final, CAND, DEFAULT_METRIC).Reasons == []


# -- rule 2: cupti kernel time far below ncu's ----------------------------------------------


def _below(cupti_ns: float, ncu_ns: float, clock_control: str = "none") -> CrossChecked:
    screen = cupti_screen({REF: [cupti_ns] * 3}, short_calls(REF))
    return check(screen, ncu_profile({REF: [ncu_ns] * 3}, clock_control=clock_control))


def test_cupti_below_ncu_beyond_the_bound_is_flagged_and_the_screen_row_doubted() -> None:
    n = 40_000.0
    edge = n - (n * KERNEL_TIME_BELOW_PCT / 100 + KERNEL_TIME_SLACK_NS)  # 28 us
    assert _below(edge, n).flags == []
    out = _below(edge - 100, n)
    final = row(out.final, REF, DEFAULT_METRIC)
    text = next(r for r in final.Reasons if "cupti below ncu" in r)
    assert "27.9 us" in text and "40 us" in text and "30 % below" in text
    assert "clock_control" not in text
    assert final.Trust == "ok"
    assert final.CrossCheck is not None and final.CrossCheck.DeviationPct == pytest.approx(-30.25)
    screen = row(out.screen, REF, CUPTI_DURATION)
    assert screen.Trust == "suspicious" and text in screen.Reasons
    # The other screen rows (span, latency) are not the contradicted number.
    assert row(out.screen, REF, CUPTI_LATENCY).Trust == "ok"
    assert out.flags == [f"cupti below ncu on {REF} config 0"]


def test_the_absolute_slack_spares_short_kernels_and_base_clocks_are_named() -> None:
    # 4 us under ncu: 1 us (25 %) + 2 us slack may be missing before it is flagged.
    assert _below(1_000.0, 4_000.0).flags == []
    out = _below(900.0, 4_000.0, clock_control="base")
    text = next(r for r in row(out.final, REF, DEFAULT_METRIC).Reasons if "cupti below" in r)
    assert "clock_control='base'" in text


def test_cupti_above_ncu_and_an_events_screen_are_not_kernel_time_rule_cases() -> None:
    assert _below(60_000.0, 40_000.0).flags == []
    # The events screen times the whole call: not comparable with ncu's kernel time.
    screen = cupti_screen({REF: [1_000.0] * 3}, short_calls(REF))
    final = ncu_profile({REF: [40_000.0] * 3})
    events_row = row(screen, REF, CUPTI_DURATION).model_copy(update={"Metric": EVENTS_METRIC})
    assert kernel_time_below(events_row, row(final, REF, DEFAULT_METRIC)) is None


# -- rule 3: host-bound calls ----------------------------------------------------------------


def test_host_bound_reason_edges() -> None:
    dev = 10_000.0
    assert host_bound_reason(dev, HOST_BOUND_RATIO * dev) is None  # 5.0x, 50 us: not above
    assert host_bound_reason(dev, HOST_BOUND_RATIO * dev + 1) is not None
    assert host_bound_reason(1_000.0, HOST_BOUND_MIN_NS) is None  # 50x, but only 50 us
    assert host_bound_reason(1_000.0, HOST_BOUND_MIN_NS + 1) is not None
    assert host_bound_reason(None, 1e6) is None and host_bound_reason(dev, None) is None


def test_host_bound_calls_are_named_on_the_cupti_rows_and_carried_to_ncus() -> None:
    # The H200: Triton softmax 161 us per call for a 9 us kernel (its Python launcher);
    # torch 116 us for 55 us is not host-bound.
    cupti = {REF: [54_000.0] * 3, CAND: [9_000.0, 9_100.0, 8_950.0]}
    lat = {REF: [116_000.0] * 3, CAND: [161_000.0, 160_000.0, 162_000.0]}
    screen = cupti_screen(cupti, lat)
    for metric in (CUPTI_DURATION, CUPTI_LATENCY):
        text = next(r for r in row(screen, CAND, metric).Reasons if "host-bound calls" in r)
        assert "161 us" in text and "17.9x" in text and "9 us" in text
    assert not any("host-bound" in r for r in row(screen, CAND, CUPTI_SPAN).Reasons)
    assert not any("host-bound" in r for r in row(screen, REF, CUPTI_DURATION).Reasons)
    assert row(screen, CAND, CUPTI_DURATION).Trust == "ok", "a note, not a verdict"
    ncu = {REF: [55_000.0] * 3, CAND: [10_000.0, 10_100.0, 9_950.0]}
    final = check(screen, ncu_profile(ncu)).final
    assert any("host-bound calls" in r for r in row(final, CAND, DEFAULT_METRIC).Reasons)
    assert not any("host-bound" in r for r in row(final, REF, DEFAULT_METRIC).Reasons)


def test_flag_host_bound_leaves_other_backends_rows_alone() -> None:
    rows = ncu_profile({REF: [1_000.0] * 3}).rows
    assert flag_host_bound(rows) == rows


def test_a_profile_stage_without_the_time_metric_gets_no_cross_check() -> None:
    screen = cupti_screen({REF: [1_000.0] * 3, CAND: [900.0] * 3}, short_calls(REF, CAND))
    final = ncu_profile({REF: [1.0] * 3, CAND: [1.0] * 3}, metric="dram__bytes_read.sum")
    out = check(screen, final)
    assert out.final == final and out.flags == []


# -- rule 4: the screen overrated a kept candidate ---------------------------------------------


def test_a_candidate_the_screen_overrated_beyond_the_noise_is_doubted_in_both_stages() -> None:
    # The screen saw the candidate at 4x the reference's speed; ncu, outside its process,
    # at the reference's own: the screen's interval lies far above ncu's.
    cupti = {REF: [20_000.0, 20_100.0, 19_900.0], CAND: [5_000.0, 5_050.0, 4_980.0]}
    ncu = {REF: [20_500.0, 20_600.0, 20_400.0], CAND: [20_400.0, 20_600.0, 20_500.0]}
    out = check(cupti_screen(cupti, short_calls(REF, CAND)), ncu_profile(ncu))
    assert list(out.overrated) == [CAND]
    assert "screen overrated" in out.overrated[CAND]
    assert f"screen overrated {CAND} on config 0" in out.flags
    for stage in (out.final, out.screen):
        metric = DEFAULT_METRIC if stage is out.final else CUPTI_DURATION
        cand = row(stage, CAND, metric)
        assert cand.Trust == "suspicious", cand
        assert any("screen overrated" in r for r in cand.Reasons)
        assert row(stage, REF, metric).Trust == "ok"
    comp = comparison(out.final, CAND, DEFAULT_METRIC)
    assert any("screen overrated" in r and "4" in r for r in comp.Reasons), comp.Reasons


@pytest.mark.parametrize(
    ("cand_screen", "why"),
    [
        (
            [17_400.0, 17_500.0, 17_450.0],
            "1.15x against 1.0x: within the floor honest timers leave",
        ),
        ([6_000.0, 19_000.0, 30_000.0], "2x at the median, but the screen's interval is wide"),
        ([25_000.0, 25_100.0, 24_900.0], "the screen underrated it: never flagged"),
    ],
)
def test_no_overrated_flag_within_the_floor_the_noise_or_below(
    cand_screen: list[float], why: str
) -> None:
    cupti = {REF: [20_000.0, 20_100.0, 19_900.0], CAND: cand_screen}
    ncu = {REF: [20_500.0, 20_600.0, 20_400.0], CAND: [20_400.0, 20_600.0, 20_500.0]}
    out = check(cupti_screen(cupti, short_calls(REF, CAND)), ncu_profile(ncu))
    assert out.overrated == {}, why
    assert row(out.final, CAND, DEFAULT_METRIC).Trust == "ok", why


def test_the_overrated_bound_is_the_profile_intervals_end_plus_the_floor() -> None:
    final = comparison(
        ncu_profile({REF: [2.0, 2.0, 2.0], CAND: [2.0, 2.0, 2.0]}), CAND, DEFAULT_METRIC
    )
    assert final.Speedup_CI95_Upper is not None
    edge = final.Speedup_CI95_Upper * (1 + OVERRATED_FLOOR_PCT / 100)
    at = final.model_copy(update={"Speedup_CI95_Lower": edge, "Speedup": edge * 1.1})
    above = at.model_copy(update={"Speedup_CI95_Lower": edge * 1.001})
    assert screen_overrated(at, final) is None
    assert screen_overrated(above, final) is not None
    no_ci = above.model_copy(update={"Speedup_CI95_Lower": None})
    assert screen_overrated(no_ci, final) is None
