"""Work that differs between calls: each timed call's kernel set, compared across a row's runs.

A row's runs are one measurement only if every timed call did the same work. The count
check refuses runs with different numbers of kernels; here the kernels themselves (name,
grid and block, a digest of the full name) and, under cupti, the copies and memsets are
compared. Records are built as extraction and the cupti samples make them, and read from
the recorded reports (tests/data/README.md); the timer's own records come from CUPTI on a
GPU (tests/gpu/test_cupti_gpu.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from nsight_core.collectors.base import Wrapped
from nsight_core.collectors.cupti import CUPTI
from nsight_core.collectors.cupti_records import (
    CopyActivity,
    KernelActivity,
    KernelSpan,
    call_spans,
    copy_kind,
    split_by_launch,
)
from nsight_core.collectors.cupti_samples import CUPTI_DURATION, CUPTI_LATENCY, call_samples
from nsight_core.collectors.extract import KernelRecord, extract_records
from nsight_core.collectors.kernel_names import launch_dims, launch_label
from nsight_core.collectors.kernel_sets import Work, kernel_set_finding, work_of
from nsight_core.errors import ErrorClass
from nsight_core.protocol import KernelTiming, RunKey, SampleEvent
from nsight_core.request import KernelsSpec
from nsight_core.results import Row
from nsight_core.rows.aggregate import aggregate_rows, normalize_rows, reduce_runs
from nsight_core.settings import JobSettings
from tests.conftest import NCU_DATA

T = "gpu__time_duration.sum"
ADD = launch_label((64, 1, 1), (128, 1, 1), "add_kernel")
ADD_HALF = launch_label((32, 1, 1), (128, 1, 1), "add_kernel")
SCALE = launch_label((64, 1, 1), (128, 1, 1), "scale_kernel")
MUL = launch_label((64, 1, 1), (128, 1, 1), "_ZN2at6native29vectorized_elementwise_kernelI3MulE")
ADD_FN = launch_label((64, 1, 1), (128, 1, 1), "_ZN2at6native29vectorized_elementwise_kernelI3AddE")


# -- labels ---------------------------------------------------------------------------------


def test_a_launch_reads_as_cuda_writes_it_with_a_digest_of_the_full_name() -> None:
    assert launch_dims(launch_label((2, 66, 1), (384, 1, 1), "nvjet")) == "<<<2x66, 384>>>"
    assert launch_dims(launch_label((1, 1, 4), (32, 4, 1))) == "<<<1x1x4, 32x4>>>"
    assert launch_label((4, 1, 1), (128, 1, 1)) == "<<<4, 128>>>"  # no name: no digest
    # unknown dimensions (a record without them) tell nothing apart but the name
    assert launch_label((0, 0, 0), (0, 0, 0)) == ""
    assert launch_label((0, 0, 0), (0, 0, 0), "k").startswith("#")
    # two instantiations of one template: same base name and grid, different launches
    assert launch_dims(MUL) == launch_dims(ADD_FN) and MUL != ADD_FN


def test_copy_kinds_read_as_cupti_names_them() -> None:
    assert copy_kind(8) == "memcpy DtoD"
    assert copy_kind(1) == "memcpy HtoD"
    assert copy_kind(None) == "memset"
    assert copy_kind(99) == "memcpy"


# -- the comparison -------------------------------------------------------------------------


def calls_of(*sets: Sequence[Work]) -> list[tuple[int, Sequence[Work]]]:
    return [(run, tuple(sorted(works))) for run, works in enumerate(sets)]


def test_alike_calls_and_a_single_call_say_nothing() -> None:
    same = [work_of("add_kernel", ADD), work_of("scale_kernel", SCALE)]
    assert kernel_set_finding(calls_of(same, same, list(reversed(same)))) is None
    assert kernel_set_finding(calls_of(same)) is None
    assert kernel_set_finding([]) is None


def test_another_kernel_in_one_run_is_suspicious_and_names_the_run_and_both_kernels() -> None:
    usual = [work_of("add_kernel", ADD)]
    found = kernel_set_finding(
        calls_of(usual, usual, [work_of("scale_kernel", SCALE)], usual, usual)
    )
    assert found is not None and found.suspicious
    assert found.reason.startswith("kernel set differs between timed calls: ")
    assert "runs 0, 1, 3, 4 launched one set" in found.reason
    assert "run 2 launched scale_kernel<<<64, 128>>> in place of add_kernel<<<64, 128>>>" in (
        found.reason
    )
    assert "#" not in found.reason  # the digest only where it is what differs


def test_the_same_kernel_with_another_grid_is_suspicious() -> None:
    usual = [work_of("add_kernel", ADD)]
    found = kernel_set_finding(calls_of(usual, [work_of("add_kernel", ADD_HALF)], usual))
    assert found is not None and found.suspicious
    assert "run 1 launched add_kernel<<<32, 128>>> in place of add_kernel<<<64, 128>>>" in (
        found.reason
    )


def test_two_instantiations_of_one_template_differ_and_the_reason_shows_the_digest() -> None:
    name = "vectorized_elementwise_kernel"
    found = kernel_set_finding(calls_of([work_of(name, MUL)], [work_of(name, ADD_FN)]))
    assert found is not None and found.suspicious
    assert f"{name}{MUL}" in found.reason and f"{name}{ADD_FN}" in found.reason


def test_many_differing_runs_are_cut_short_and_ties_go_to_the_earliest_run() -> None:
    sets = [[work_of(f"k{run}", ADD)] for run in range(6)]  # every run its own kernel
    found = kernel_set_finding(calls_of(*sets))
    assert found is not None and found.suspicious
    assert "run 0 launched one set" in found.reason
    assert "2 more sets differ too" in found.reason  # three named, two more counted


def test_copies_that_differ_alone_are_named_but_leave_trust_alone() -> None:
    """An honest cache that copies on some calls only (legit_stateful_calls: a clone, on
    three calls out of four): no backend times a copy, so the values stand."""
    kernel = work_of("softmax", ADD)
    clone = work_of("memcpy DtoD", "8192 B", copy=True)
    found = kernel_set_finding(calls_of([kernel, clone], [kernel], [kernel, clone]))
    assert found is not None and not found.suspicious
    assert found.reason.startswith("copies or memsets differ between timed calls: ")
    assert "run 1 did not launch memcpy DtoD 8192 B" in found.reason


# -- through reduction and rows (ncu-like records) ------------------------------------------


def ncu_runs(
    launches: Sequence[Sequence[tuple[str, str]]],
) -> tuple[list[KernelRecord], list[RunKey]]:
    """Records of annotation 'cand', config 0: run i launched ``launches[i]`` (name, launch)."""
    records, keys, seq = [], [], 0
    for run, kernels in enumerate(launches):
        key = RunKey("cand", 0, run)
        keys.append(key)
        for name, launch in kernels:
            records.append(KernelRecord(key, name, name, T, 10.0 + run, "ns", seq, launch))
            seq += 1
    return records, keys


def rows_for(launches: Sequence[Sequence[tuple[str, str]]], ignore: Sequence[str] = ()) -> Row:
    records, keys = ncu_runs(launches)
    values = reduce_runs(records, keys, [T], KernelsSpec(ignore=list(ignore)))
    [row] = aggregate_rows(values)
    return row


def test_a_row_whose_runs_launched_other_kernels_is_suspicious_not_failed() -> None:
    usual = [("add_kernel", ADD)]
    row = rows_for([usual, [("scale_kernel", SCALE)], usual])
    assert row.Trust == "suspicious" and row.ErrorClass is None and row.NumRuns == 3
    assert any(r.startswith("kernel set differs between timed calls") for r in row.Reasons)
    assert row.Kernels == ["add_kernel", "scale_kernel"]  # what rows list is unchanged


def test_alike_runs_keep_their_trust_and_records_without_launches_compare_by_name() -> None:
    """A CUDA graph replayed every call launches the same kernels each time; a report or a
    backend that gives no launch (range replay, events) compares names alone."""
    graph = [("add_kernel", ADD), ("scale_kernel", SCALE)]
    row = rows_for([graph, graph, graph])
    assert row.Trust in ("ok", "noisy")
    assert not any("kernel set" in r for r in row.Reasons)
    assert rows_for([[("range", "")]] * 3).Trust in ("ok", "noisy")


def test_ignored_helpers_are_left_out_of_the_kernel_set() -> None:
    """A helper the request ignores (a lazy zero-fill on some calls) is not compared."""
    row = rows_for(
        [[("zero_fill", ADD), ("k", SCALE)], [("k", SCALE)], [("k", SCALE), ("zero_fill", ADD)]],
        ignore=["zero_*"],
    )
    assert not any("kernel set" in r for r in row.Reasons)


def test_a_count_that_varies_stays_the_count_check_failure() -> None:
    records, keys = ncu_runs([[("a", ADD)], [("a", ADD), ("b", SCALE)], [("a", ADD)]])
    values = reduce_runs(records, keys, [T], KernelsSpec(combine="sum"))
    assert [f.ErrorClass for f in values.failures] == [ErrorClass.KERNEL_COUNT_MISMATCH]
    [row] = aggregate_rows(values)
    assert row.Trust == "failed" and not any("kernel set" in r for r in row.Reasons)


def test_failed_runs_are_left_out_of_the_comparison() -> None:
    records, keys = ncu_runs([[("a", ADD)], [("a", ADD)], [("b", SCALE)]])
    failed = [KernelRecord(keys[2], "b", "b", T, None, "ns", 9, SCALE)]
    records = [r for r in records if r.key != keys[2]] + failed
    [row] = aggregate_rows(reduce_runs(records, keys, [T], KernelsSpec()))
    assert row.NumRuns == 2 and not any("kernel set" in r for r in row.Reasons)


def test_normalized_rows_carry_the_finding_too() -> None:
    records, keys = ncu_runs([[("a", ADD)], [("b", SCALE)], [("a", ADD)]])
    ref = [
        KernelRecord(RunKey("ref", 0, run), "r", "r", T, 20.0, "ns", 100 + run, ADD)
        for run in range(3)
    ]
    values = reduce_runs(
        [*records, *ref], [*keys, *(r.key for r in ref)], [T], KernelsSpec(combine="sum")
    )
    rows = {r.Annotation: r for r in normalize_rows(values, "ref")}
    assert rows["cand"].Trust == "suspicious" and rows["ref"].Trust in ("ok", "noisy")


# -- from the recorded reports ----------------------------------------------------------------


def test_ncu_reports_give_each_kernel_its_launch_from_the_launch_attributes(
    manifest: dict[str, Any],
) -> None:
    rep = extract_records(NCU_DATA / manifest["one_kernel"]["report"], [T])
    launches = {(r.key.annotation, r.key.config_id, launch_dims(r.launch)) for r in rep.records}
    # n=4096 and 2^20 elements: BLOCK 1024 (add) and 256 (add_v2), 4 warps each
    assert launches == {
        ("ref.py:add", 0, "<<<4, 128>>>"),
        ("cand.py:add_v2", 0, "<<<16, 128>>>"),
        ("ref.py:add", 1, "<<<1024, 128>>>"),
        ("cand.py:add_v2", 1, "<<<4096, 128>>>"),
    }
    assert all(
        r.launch.endswith(launch_label((0, 0, 0), (0, 0, 0), r.demangled)) for r in rep.records
    )
    ranged = extract_records(NCU_DATA / manifest["range_replay"]["report"], [T])
    assert {r.launch for r in ranged.records} == {""}  # a range result is no one launch


def test_recorded_kernels_moved_between_runs_make_the_row_suspicious(
    manifest: dict[str, Any],
) -> None:
    """Real records of the one-kernel report, re-keyed as one candidate's runs: runs 0 and
    1 launched the reference's kernel, run 2 the candidate's (same count, another kernel);
    config 1 keeps the reference's kernel but takes run 2 from the larger config (another
    grid). Every metric row of both configs is suspicious; the reference's own are not."""
    rep = extract_records(NCU_DATA / manifest["one_kernel"]["report"], [T])
    by_key = {(r.key.annotation, r.key.config_id, r.key.run): r for r in rep.records}

    def moved(cid: int, run: int, source: tuple[str, int, int]) -> KernelRecord:
        r = by_key[source]
        return KernelRecord(
            RunKey("mixed", cid, run), r.kernel, r.demangled, T, r.value, r.unit, r.seq, r.launch
        )

    records = [
        moved(0, 0, ("ref.py:add", 0, 0)),
        moved(0, 1, ("ref.py:add", 0, 1)),
        moved(0, 2, ("cand.py:add_v2", 0, 2)),
        moved(1, 0, ("ref.py:add", 0, 0)),
        moved(1, 1, ("ref.py:add", 0, 1)),
        moved(1, 2, ("ref.py:add", 1, 2)),
    ]
    keys = [r.key for r in records]
    own = [r for r in rep.records if r.key.annotation == "ref.py:add"]
    values = reduce_runs([*records, *own], [*keys, *(r.key for r in own)], [T], KernelsSpec())
    rows = {(r.Annotation, r.ConfigId): r for r in aggregate_rows(values)}
    assert rows["mixed", 0].Trust == "suspicious"
    assert "run 2 launched add_kernel_v2<<<16, 128>>> in place of add_kernel<<<4, 128>>>" in (
        " ".join(rows["mixed", 0].Reasons)
    )
    assert rows["mixed", 1].Trust == "suspicious"
    assert "run 2 launched add_kernel<<<1024, 128>>> in place of add_kernel<<<4, 128>>>" in (
        " ".join(rows["mixed", 1].Reasons)
    )
    assert rows["ref.py:add", 0].Trust in ("ok", "noisy")
    assert rows["ref.py:add", 1].Trust in ("ok", "noisy")


def test_the_recorded_kernel_set_case_when_there_is_one(manifest: dict[str, Any]) -> None:
    """tools/record_fixtures.py's `set_varies`, once recorded on a GPU host."""
    entry = manifest.get("set_varies")
    if not entry or not entry.get("report"):
        pytest.skip("set_varies is not recorded yet: tools/record_fixtures.py --cases set_varies")
    rep = extract_records(NCU_DATA / entry["report"], entry["metrics"])
    keys = [RunKey(e["annotation"], e["config_id"], e["run"]) for e in entry["expected"]]
    values = reduce_runs(rep.records, keys, entry["metrics"], KernelsSpec())
    rows = {(r.Annotation, r.ConfigId): r for r in aggregate_rows(values)}
    for cid in (0, 1):
        assert rows["vary.py:switch", cid].Trust == "suspicious"
        assert rows["vary.py:switch", cid].ErrorClass is None
        assert rows["steady.py:add", cid].Trust in ("ok", "noisy")


# -- under cupti: the timer's records, the judge's samples, the rows --------------------------


def test_the_timer_sends_each_kernels_launch_and_its_copies_by_kind_and_size() -> None:
    kernels = [
        KernelActivity("_Z3addPf", 100, 200, 7, 1, grid=(64, 1, 1), block=(128, 1, 1)),
        KernelActivity("scale_kernel", 300, 400, 7, 2, grid=(64, 1, 1), block=(128, 1, 1)),
    ]
    copies = [
        CopyActivity("memcpy DtoD", 8192, 210, 220, 3),
        CopyActivity("memcpy DtoD", 8192, 230, 240, 4),
        CopyActivity("memset", 4096, 250, 260, 5),
    ]
    spans = call_spans(kernels, copies)
    assert [(s.name, launch_dims(s.launch), s.kind) for s in spans] == [
        ("add", "<<<64, 128>>>", "kernel"),
        ("scale_kernel", "<<<64, 128>>>", "kernel"),
        ("memcpy DtoD", "8192 B x2", "copy"),
        ("memset", "4096 B", "copy"),
    ]
    assert spans[2].start_ns == 210 and spans[2].end_ns == 240


def test_copies_are_split_by_their_device_start_like_kernels_without_a_launch_record() -> None:
    copies = [
        CopyActivity("memcpy DtoD", 64, 500, 510, 1),  # the harness's output copy, before
        CopyActivity("memcpy HtoD", 64, 1_500, 1_510, 2),  # in the call
        CopyActivity("memcpy DtoD", 64, 2_500, 2_510, 3),  # the snapshot after the window
    ]
    before, inside, after = split_by_launch(copies, [], 1_000, 2_000)
    assert [c.correlation_id for c in (*before, *inside, *after)] == [1, 2, 3]
    assert [c.correlation_id for c in inside] == [2]


def timing(name: str, launch: str, kind: str = "kernel", start: int = 0) -> KernelTiming:
    return KernelTiming.model_validate(
        {
            "name": name,
            "start_ns": start,
            "end_ns": start + 1_000,
            "stream": 7,
            "launch": launch,
            "kind": kind,
        }
    )


def test_the_judge_files_copies_apart_from_the_time_and_launches_with_each_kernel() -> None:
    got = call_samples(
        RunKey("cand", 0, 0),
        9_000.0,
        [
            timing("add", ADD),
            timing("memcpy DtoD", "8192 B", "copy"),
            timing("b", SCALE, start=2_000),
        ],
    )
    durations = [s for s in got if s.metric == CUPTI_DURATION]
    assert [(s.kernel, s.launch) for s in durations] == [("add", ADD), ("b", SCALE)]
    assert got[-1].kernel == "memcpy DtoD" and got[-1].launch == "8192 B"
    assert [s.metric for s in got if s.kernel is None] == ["cupti__kernel_span", CUPTI_LATENCY]


def cupti_rows(calls: Sequence[Sequence[KernelTiming]]) -> dict[str, Row]:
    samples: list[SampleEvent] = []
    for run, kernels in enumerate(calls):
        samples += call_samples(RunKey("cand", 0, run), 20_000.0, kernels)
    spec = KernelsSpec(combine="sum")
    s = JobSettings(backend="cupti", metrics=(CUPTI_DURATION,), kernels=spec, runs=len(calls))
    got = CUPTI.read_records(Wrapped([]), samples, s)
    keys = [RunKey("cand", 0, run) for run in range(len(calls))]
    values = reduce_runs(got.records, keys, got.metrics, s.kernels)
    assert values.failures == ()
    return {r.Metric: r for r in aggregate_rows(values)}


def test_under_cupti_copies_add_no_launch_and_differing_ones_are_only_named() -> None:
    clone = timing("memcpy DtoD", "8192 B", "copy")
    rows = cupti_rows(
        [[timing("softmax", ADD), clone], [timing("softmax", ADD)], [timing("softmax", ADD), clone]]
    )
    dur = rows[CUPTI_DURATION]
    assert dur.Kernels == ["softmax"] and dur.RawValues == [1_000.0] * 3
    assert dur.Trust in ("ok", "noisy")
    assert any(r.startswith("copies or memsets differ") for r in dur.Reasons)


def test_under_cupti_another_kernel_on_one_call_makes_every_row_of_it_suspicious() -> None:
    rows = cupti_rows([[timing("add", ADD)], [timing("add", ADD_HALF)], [timing("add", ADD)]])
    assert {r.Trust for r in rows.values()} == {"suspicious"}
    assert all(any("kernel set differs" in x for x in r.Reasons) for r in rows.values())


def test_spans_made_before_launches_were_kept_still_compare() -> None:
    """A reply without launches (an older contestant) compares names only."""
    old = [KernelSpan("add", 0, 1_000, 7)]
    rows = cupti_rows([[timing(k.name, k.launch) for k in old]] * 3)
    assert rows[CUPTI_DURATION].Trust in ("ok", "noisy")
