"""diagnose.py: the bound, the headroom, the floor, and the ncu plumbing of ``diagnose``.

Classification is driven by synthetic per-run values (the arithmetic, not pretending to be
ncu); the fixtures recorded on the H200 by tools/record_diagnose_fixtures.py check the
same code on real reports and skip until they are committed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nsight_core.collectors.extract import KernelRecord
from nsight_core.collectors.ncu import build_ncu_command
from nsight_core.collectors.ncu_diagnose import (
    DIAGNOSE_METRICS,
    DIAGNOSE_SECTIONS,
    DRAM_BYTES,
    DRAM_CLOCK,
    DRAM_PEAK_PER_CYCLE,
    MEM_PCT,
    SM_PCT,
    TENSOR_PCT,
    diagnose_metrics,
)
from nsight_core.host.catalog import check_metric, estimate_passes, load_shipped
from nsight_core.protocol import FloorEvent, RunKey
from nsight_core.request import DEFAULT_METRIC, KernelsSpec, ProfileRequest
from nsight_core.results import ProfileResult, Row
from nsight_core.rows.aggregate import RowContext, aggregate_rows, reduce_runs
from nsight_core.rows.diagnose import (
    Floor,
    GroupInputs,
    Peak,
    RunSol,
    apply_floor,
    classify,
    diagnose_group,
    diagnose_run,
    fold_kernels,
    median_sol,
    table_peak,
)
from nsight_core.rows.floor import FLOOR_FRACTION
from nsight_core.rows.ncu_rules import rule_finding
from nsight_core.rows.runs import read_events
from nsight_core.runtime.leaves import nbytes_of
from nsight_core.settings import JobSettings

H200_PEAK = 4.8e12
DATA = Path(__file__).parents[1] / "data" / "ncu"


def softmax_like() -> RunSol:
    """The issue's numbers: 134 MB in 31.4 us on a 4.8 TB/s GPU (about 89 % of DRAM peak)."""
    return RunSol(
        time_ns=31_400.0,
        sm_pct=35.0,
        mem_pct=90.0,
        tensor_pct=0.0,
        dram_bytes=134_217_728.0,
        dram_peak_bps=H200_PEAK,
        grid=4096.0,
        block=1024.0,
        waves=7.8,
        kernels=("softmax_kernel",),
    )


# -- what ncu is asked for -------------------------------------------------------------


def test_every_diagnose_metric_is_valid_in_the_shipped_gh100_catalog() -> None:
    idx = load_shipped("gh100", "2025.3.1")
    checks = [check_metric(idx, m) for m in DIAGNOSE_METRICS]
    assert {c.name: c.status for c in checks} == {m: "valid" for m in DIAGNOSE_METRICS}
    # The catalog's heuristic: 3 passes with diagnose against 1 for the time alone; ncu's
    # own count (and the SpeedOfLight section's) is measured on the H200, see docs.
    assert estimate_passes(checks, idx) == 3
    assert estimate_passes([check_metric(idx, DEFAULT_METRIC)], idx) == 1


def test_diagnose_metrics_keep_the_requested_ones_first_without_duplicates() -> None:
    out = diagnose_metrics(["lts__t_bytes.sum", DEFAULT_METRIC])
    assert out[:2] == ["lts__t_bytes.sum", DEFAULT_METRIC]
    assert len(out) == len(set(out)) == len(DIAGNOSE_METRICS) + 1


def test_ncu_command_with_sections_adds_each_section_after_the_metrics() -> None:
    argv = build_ncu_command(
        "ncu",
        metrics=diagnose_metrics([DEFAULT_METRIC]),
        cache_control="all",
        clock_control="none",
        replay_mode="kernel",
        report_path="r.ncu-rep",
        log_path="ncu.log",
        target_argv=["python", "x.py"],
        sections=DIAGNOSE_SECTIONS,
    )
    i = argv.index("--section")
    assert argv[i + 1] == "SpeedOfLight"
    assert argv[argv.index("--metrics") + 1].split(",") == list(DIAGNOSE_METRICS)
    plain = build_ncu_command(
        "ncu",
        metrics=[DEFAULT_METRIC],
        cache_control="all",
        clock_control="none",
        replay_mode="kernel",
        report_path="r.ncu-rep",
        log_path="ncu.log",
        target_argv=["python", "x.py"],
    )
    assert "--section" not in plain


def test_request_diagnose_is_strict_off_by_default_and_reaches_job_settings() -> None:
    base = {"reference": "a.py:f", "candidates": ["b.py:g"], "inputs": "a.py:make"}
    assert JobSettings.of_request(ProfileRequest.model_validate(base)).diagnose is False
    on = ProfileRequest.model_validate({**base, "diagnose": True})
    assert JobSettings.of_request(on).diagnose is True
    with pytest.raises(ValueError, match="diagnose"):
        ProfileRequest.model_validate({**base, "diagnose": "yes"})


# -- the bound ---------------------------------------------------------------------------


def test_memory_bound_softmax_reports_dram_share_headroom_and_next_step() -> None:
    v = classify(softmax_like())
    assert v.bound == "memory"
    assert v.resource == "DRAM bandwidth"
    dram_pct = 100 * 134_217_728 / 31.4e-6 / H200_PEAK
    assert v.headroom == pytest.approx(100 / dram_pct)
    assert v.next_step is not None and f"{dram_pct:.0f} % of peak DRAM" in v.next_step
    assert any("same DRAM bytes" in a for a in v.assumptions)


def test_memory_bound_with_low_dram_share_blames_the_busiest_cache_unit() -> None:
    sol = RunSol(
        time_ns=10_000.0, sm_pct=20.0, mem_pct=85.0, dram_bytes=1e6, dram_peak_bps=H200_PEAK
    )
    v = classify(sol)
    assert v.bound == "memory"
    assert v.resource is not None and "busiest memory unit" in v.resource
    assert v.headroom == pytest.approx(100 / 85)
    assert v.next_step is not None and "access patterns" in v.next_step


def test_compute_bound_matmul_names_the_tensor_pipe() -> None:
    sol = RunSol(
        time_ns=200_000.0,
        sm_pct=88.0,
        mem_pct=45.0,
        tensor_pct=82.0,
        dram_bytes=1e8,
        dram_peak_bps=H200_PEAK,
    )
    v = classify(sol)
    assert v.bound == "compute"
    assert v.headroom == pytest.approx(100 / 88)
    assert v.next_step is not None and "tensor pipe at 82 %" in v.next_step


def test_one_block_kernel_is_latency_bound_without_a_headroom_and_says_why() -> None:
    sol = RunSol(time_ns=2_500.0, sm_pct=0.4, mem_pct=1.1, grid=1.0, block=32.0, waves=0.002)
    v = classify(sol)
    assert v.bound == "latency"
    assert v.headroom is None
    assert any("no throughput limit bounds" in w for w in v.why)
    assert v.next_step is not None and "1 blocks" in v.next_step


def test_launch_host_bound_is_claimed_only_with_a_host_time() -> None:
    sol = RunSol(time_ns=2_000.0, sm_pct=0.5, mem_pct=1.0)
    assert classify(sol, host_ns=20_000.0).bound == "launch/host"
    without = classify(sol)
    assert without.bound == "latency"
    assert any("no host-side time" in w for w in without.why)


def test_close_compute_and_memory_are_reported_as_balanced() -> None:
    v = classify(RunSol(time_ns=1e5, sm_pct=75.0, mem_pct=80.0))
    assert v.bound == "memory"
    assert any("within" in w for w in v.why)


def test_missing_speed_of_light_gives_no_bound_and_names_the_metric() -> None:
    v = classify(RunSol(time_ns=1e5, sm_pct=50.0))
    assert v.bound is None
    assert any(MEM_PCT in w for w in v.why)


def test_kernels_of_one_call_fold_time_weighted_and_runs_by_median() -> None:
    k1 = {
        DEFAULT_METRIC: 1000.0,
        SM_PCT: 10.0,
        MEM_PCT: 90.0,
        TENSOR_PCT: 0.0,
        DRAM_BYTES: 4e6,
        DRAM_PEAK_PER_CYCLE: 1000.0,
        DRAM_CLOCK: 4.8e9,
    }
    k2 = {
        DEFAULT_METRIC: 3000.0,
        SM_PCT: 50.0,
        MEM_PCT: 30.0,
        TENSOR_PCT: 0.0,
        DRAM_BYTES: 1e6,
        DRAM_PEAK_PER_CYCLE: 1000.0,
        DRAM_CLOCK: 4.8e9,
    }
    run = fold_kernels([k1, k2], ["a", "b"])
    assert run.time_ns == 4000.0
    assert run.sm_pct == pytest.approx((1000 * 10 + 3000 * 50) / 4000)
    assert run.mem_pct == pytest.approx((1000 * 90 + 3000 * 30) / 4000)
    assert run.dram_bytes == 5e6
    assert run.dram_peak_bps == pytest.approx(4.8e12)
    assert run.kernels == ("a", "b")
    slow = RunSol(time_ns=9000.0, sm_pct=1.0)
    med = median_sol([run, run, slow])
    assert med.time_ns == 4000.0
    assert med.mem_pct == pytest.approx(run.mem_pct)


def test_a_kernel_without_a_value_leaves_the_folded_value_null() -> None:
    run = fold_kernels([{DEFAULT_METRIC: 10.0, SM_PCT: 5.0}, {DEFAULT_METRIC: 10.0}], ["a", "b"])
    assert run.sm_pct is None and run.time_ns == 20.0


def test_diagnosis_states_numbers_with_evidence_and_every_null_says_why() -> None:
    sol = softmax_like()
    floor = Floor(67_108_864, 67_108_864, Peak(H200_PEAK, "ncu"))
    d = diagnose_group(
        "cand.py:softmax",
        0,
        {"rows": 4096},
        GroupInputs(runs={0: sol, 1: sol}),
        floor,
        backend_has_counters=True,
    )
    assert d.Bound == "memory" and d.NumRuns == 2
    bandwidth = 134_217_728 / 31.4e-6
    assert d.DramBandwidth == pytest.approx(bandwidth)
    assert d.DramPct == pytest.approx(100 * bandwidth / H200_PEAK)
    assert d.FloorNs == pytest.approx(67_108_864 / H200_PEAK * 1e9)
    assert d.ReadWriteFloorNs == pytest.approx(2 * 67_108_864 / H200_PEAK * 1e9)
    assert d.Rules == [] and any(w.startswith("Rules:") for w in d.Why)
    assert d.Headroom is not None and d.Assumptions
    ProfileResult.model_validate(
        {"result_id": "x", "status": "done", "created_at": "t", "diagnoses": [d.model_dump()]}
    )


def test_diagnosis_without_counters_keeps_the_floor_and_says_to_use_ncu() -> None:
    floor = Floor(8, 1_000_000, Peak(H200_PEAK, "table"))
    d = diagnose_group("ref", 0, {}, None, floor, backend_has_counters=False)
    assert d.Bound is None and d.ComputeThroughputPct is None
    assert d.FloorNs == pytest.approx(1e6 / H200_PEAK * 1e9)
    assert any("reads no counters" in w for w in d.Why)


def test_rule_text_loses_ncu_link_markup_and_is_cut() -> None:
    f = rule_finding(
        "SOLBottleneck",
        "SpeedOfLight",
        2,
        "High Memory Throughput",
        "See the @section:MemoryWorkloadAnalysis:Memory Workload Analysis@ and "
        "@url:the guide:https://docs.nvidia.com/x@. " + "x" * 400,
        12.5,
    )
    assert f.Severity == "optimization"
    assert f.Text.startswith("See the Memory Workload Analysis and the guide.")
    assert len(f.Text) == 300 and f.EstimatedSpeedupPct == 12.5


# -- the floor ---------------------------------------------------------------------------


def test_nbytes_counts_every_array_in_nested_inputs_and_ignores_plain_values() -> None:
    a, b = np.zeros((4, 8), dtype=np.float32), np.zeros(3, dtype=np.float64)
    assert nbytes_of(((a,), {"b": b, "n": 3})) == 4 * 8 * 4 + 3 * 8
    assert nbytes_of((1, 2.0, "x")) is None


def test_peak_table_matches_gpu_names_as_backends_report_them() -> None:
    assert table_peak("NVIDIA H200") == Peak(4.8e12, table_peak("NVIDIA H200").source)  # type: ignore[union-attr]
    assert table_peak("cuda:0 (NVIDIA H200)").bytes_per_s == 4.8e12  # type: ignore[union-attr]
    assert table_peak("NVIDIA GH200 480GB").bytes_per_s == 4.9e12  # type: ignore[union-attr]
    assert table_peak("NVIDIA H100 80GB HBM3").bytes_per_s == 3.35e12  # type: ignore[union-attr]
    assert table_peak("NVIDIA L40S").bytes_per_s == 0.864e12  # type: ignore[union-attr]
    assert table_peak("cpu") is None and table_peak("Some GPU") is None


def _time_rows(values_ns: list[float]) -> list[Row]:
    keys = [RunKey("cand", 0, r) for r in range(len(values_ns))]
    records = [
        KernelRecord(k, "k", "k", DEFAULT_METRIC, v, "ns", i)
        for i, (k, v) in enumerate(zip(keys, values_ns, strict=True))
    ]
    values = reduce_runs(records, keys, [DEFAULT_METRIC], KernelsSpec())
    return aggregate_rows(values, RowContext(configs=[{}]))


def test_a_time_clearly_below_the_write_floor_makes_the_row_suspicious_naming_it() -> None:
    floor = Floor(0, 134_217_728, Peak(H200_PEAK, "NVIDIA datasheet peak"))
    write_ns = 134_217_728 / H200_PEAK * 1e9  # about 28 us
    fast = _time_rows([write_ns * FLOOR_FRACTION * 0.5] * 3)
    flagged = apply_floor(fast, {0: floor})
    assert flagged[0].Trust == "suspicious"
    assert any("physical floor" in r and "134 MB" in r for r in flagged[0].Reasons)
    plausible = _time_rows([write_ns * 0.9] * 3)  # under the floor, but not clearly
    assert apply_floor(plausible, {0: floor})[0].Trust == plausible[0].Trust


def test_floor_events_are_read_back_and_become_floors_with_the_table_peak(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text(
        FloorEvent(config_id=0, bytes_in=16, bytes_out=1_000_000).model_dump_json() + "\n"
    )
    read = read_events(events)
    assert read.floors == [FloorEvent(config_id=0, bytes_in=16, bytes_out=1_000_000)]
    job = diagnose_run(
        None,
        diagnose=True,
        groups=[("ref", 0)],
        configs=[{}],
        floor_events=read.floors,
        gpu="cuda:0 (NVIDIA H200)",
    )
    assert job.floors[0].peak is not None and "datasheet" in job.floors[0].peak.source
    assert job.diagnoses[0].FloorBytesOut == 1_000_000 and job.notes == []
    cpu = diagnose_run(
        None, diagnose=False, groups=[("ref", 0)], configs=[{}], floor_events=read.floors, gpu="cpu"
    )
    assert cpu.diagnoses == [] and cpu.floors[0].peak is None
    assert any("CPU" in n for n in cpu.notes)


# -- recorded reports (tools/record_diagnose_fixtures.py on the H200) ----------------------

FIXTURES = {
    "diagnose_copy": "memory",
    "diagnose_softmax": "compute",  # torch's softmax kernel: SM 70 %, DRAM 44 % on the H200
    "diagnose_matmul": "compute",
    "diagnose_tiny": "latency",
}


@pytest.mark.parametrize(("case", "bound"), sorted(FIXTURES.items()))
def test_recorded_report_gives_the_expected_bound(case: str, bound: str) -> None:
    report = DATA / f"{case}.ncu-rep"
    if not report.exists():
        pytest.skip(
            f"{report.name} not recorded yet: run tools/record_diagnose_fixtures.py "
            "on a GPU host with ncu (see docs/diagnose.md)"
        )
    pytest.importorskip("ncu_report")
    job = diagnose_run(
        report, diagnose=True, groups=[(case, 0)], configs=[{}], floor_events=[], gpu=None
    )
    d = job.diagnoses[0]
    assert d.Bound == bound, d.Why
    assert d.ComputeThroughputPct is not None and d.MemoryThroughputPct is not None
    assert d.DramPeakBandwidth is not None
    if bound == "memory":
        assert d.DramPct is not None and d.DramPct > 60
    if case in ("diagnose_copy", "diagnose_softmax"):
        # DRAM is these kernels' busiest memory unit: bytes moved / time / ncu's peak must
        # agree with ncu's own memory throughput within 5 points (issue 15).
        assert d.DramPct is not None
        assert abs(d.DramPct - d.MemoryThroughputPct) <= 5.0, (d.DramPct, d.MemoryThroughputPct)
