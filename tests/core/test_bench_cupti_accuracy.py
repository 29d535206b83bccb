"""tools/bench/bench_cupti_accuracy.py's pure parts on CPU: the ncu range names and their
grouping, activity records into measured calls, the worker's JSON, the summary, the
offset + slope fit and where it meets 3 %, the table; and its process handling with real
processes (a variant past its time limit is killed with its group; a host without ncu or
cupti gets every variant's reason, not a crash). The ctypes declarations of CUPTI's range
profiler structs are held to the sizes CUPTI 13.0's headers give."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "tools" / "bench"
sys.path.insert(0, str(BENCH_DIR))

import bench_cupti_accuracy as bench  # noqa: E402
import cupti_range  # noqa: E402


def test_range_names_round_trip_and_foreign_names_are_none() -> None:
    assert bench.parse_range_name(bench.range_name(7, 19)) == (7, 19)
    for other in ("c1", "c1:r2:x", "x1:r2", "c1:rx", "h:c1:r2", ""):
        assert bench.parse_range_name(other) is None


def test_ncu_actions_group_into_runs_in_run_order_without_foreign_ranges() -> None:
    actions = [
        ("c3:r1", "k_a", 10.0),
        ("c3:r0", "k_a", 11.0),
        ("c3:r0", "k_b", 1.0),
        ("u:warm", "k_a", 99.0),
        ("c0:r0", "gemm", 5.0),
    ]
    samples = bench.group_by_range(actions)
    assert samples == {0: [[("gemm", 5.0)]], 3: [[("k_a", 11.0), ("k_b", 1.0)], [("k_a", 10.0)]]}
    assert bench.call_totals(samples[3]) == [12.0, 10.0]


def test_activity_records_land_in_the_call_whose_window_holds_their_start() -> None:
    windows = [(100, 200), (300, 400)]
    records = [
        ("flush", 50, 90),  # the L2 flush before the first window
        ("b", 150, 180),
        ("a", 110, 140),
        ("c", 310, 390),
        ("late", 450, 470),
    ]
    assert bench.assign_to_windows(records, windows) == [
        [("a", 30.0), ("b", 30.0)],
        [("c", 80.0)],
    ]


def test_worker_json_is_read_back_with_its_errors() -> None:
    doc = json.loads(
        json.dumps(
            {
                "samples": {"2": [[["k", 5.5]], []]},
                "errors": {"4": "RuntimeError: boom"},
                "setup_error": None,
            }
        )
    )
    samples, errors, setup = bench.parse_worker_doc(doc)
    assert samples == {2: [[("k", 5.5)], []]}
    assert errors == {4: "RuntimeError: boom"}
    assert setup is None
    assert bench.parse_worker_doc({"setup_error": "ModuleNotFoundError: cupti"})[2] == (
        "ModuleNotFoundError: cupti"
    )


def test_summary_gives_median_and_spread() -> None:
    s = bench.summarize([100.0, 102.0, 98.0, 101.0, 99.0])
    assert s is not None and s.median == 100.0 and s.n == 5
    assert s.iqr_pct == pytest.approx(2.0)
    assert bench.summarize([]) is None


def test_fit_recovers_a_constant_offset_and_says_where_3_percent_is_met() -> None:
    durations = [2_000.0, 10_000.0, 50_000.0, 1_000_000.0]
    fit = bench.fit_offset_slope(durations, [600.0] * 4)
    assert fit is not None
    assert fit.offset_ns == pytest.approx(600.0) and fit.slope == pytest.approx(0.0, abs=1e-12)
    assert bench.min_duration_within(fit) == pytest.approx(20_000.0)  # 600 ns is 3 % of 20 us


def test_fit_of_a_proportional_gap_never_meets_3_percent() -> None:
    durations = [2_000.0, 10_000.0, 50_000.0, 1_000_000.0]
    fit = bench.fit_offset_slope(durations, [100.0 + 0.05 * d for d in durations])
    assert fit is not None and fit.slope == pytest.approx(0.05) and fit.r2 == pytest.approx(1.0)
    assert bench.min_duration_within(fit) is None


def test_fit_with_a_negative_offset_and_a_small_slope() -> None:
    fit = bench.Fit(offset_ns=-400.0, slope=0.01, r2=0.9, n=5)
    # -400/d + 0.01 >= -0.03 from d = 400 / 0.04 = 10 us; above, it never exceeds +3 %.
    assert bench.min_duration_within(fit) == pytest.approx(10_000.0)
    assert bench.fit_offset_slope([5.0, 5.0], [1.0, 2.0]) is None  # one duration: no line


def _result(variant: str, per_case: dict[int, list[float]], name: str) -> bench.VariantResult:
    return bench.VariantResult(
        variant, samples={c: [[(name, v)] for v in vals] for c, vals in per_case.items()}
    )


def test_table_compares_each_variant_per_case_and_reports_failures() -> None:
    ncu = _result("ncu", {0: [2_000.0] * 3, 10: [1_000_000.0] * 3}, "elementwise_kernel")
    kernel = _result("kernel", {0: [2_500.0] * 3, 10: [1_000_500.0] * 3}, "_Z6kernelv")
    broken = bench.VariantResult("range", error="CuptiCallError: cuptiRangeProfilerEnable")
    rows = bench.compare([0, 10], ncu, [kernel, broken])
    assert rows[0].kernels == "elementwise_kernel"
    cell = rows[0].cells["kernel"]
    assert cell is not None and cell.diff_ns == 500.0 and cell.diff_pct == pytest.approx(25.0)
    assert rows[0].cells["range"] is None
    text = bench.format_table(
        rows, ["kernel", "range"], {"ncu": ncu, "kernel": kernel, "range": broken}
    )
    assert "scale 2^12" in text and "matmul bf16 1024" in text
    assert "+25.00" in text
    assert "kernel: 1/2 cases within 3 %; diff = +500 ns +0.00 % x duration" in text
    assert "within 3 % for kernels of 16.7 us and longer" in text
    assert "range: no case to compare" in text
    assert "range: 0.0 s; FAILED: CuptiCallError: cuptiRangeProfilerEnable" in text


def test_case_selection_by_index_and_name() -> None:
    assert bench.select_cases("all") == list(range(len(bench.CASES)))
    picked = bench.select_cases("softmax triton,0")
    assert [bench.CASES[i].name for i in picked] == [
        "scale 2^12",
        "softmax triton 4096x1024",
        "softmax triton 4096x4096",
    ]


def test_a_variant_past_its_limit_is_killed_with_its_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    code = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(60)\n"
    )
    t0 = time.monotonic()
    rc, wall = bench.run_bounded([sys.executable, "-c", code], 2.0, tmp_path / "log")
    assert rc is None and wall < 30 and time.monotonic() - t0 < 30
    assert "killed after 2 s" in (tmp_path / "log").read_text()
    grandchild = int(pid_file.read_text())
    for _ in range(50):  # reaped by init shortly after the kill
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"process {grandchild} of the killed group still runs")


def test_a_host_without_ncu_gets_the_reason_and_every_variant_still_reports(
    tmp_path: Path,
) -> None:
    out = tmp_path / "acc.json"
    env = dict(os.environ, NSPY_NCU=str(tmp_path / "no-ncu-here"))
    proc = subprocess.run(
        [sys.executable, str(BENCH_DIR / "bench_cupti_accuracy.py"), "--variants",
         "ncu,concurrent", "--ncu-again", "--cases", "scale 2^12", "--runs", "2", "--warmup", "0",
         "--timeout", "60", "--json", str(out)],
        capture_output=True, text=True, timeout=180, env=env,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr  # no baseline: no comparison
    assert "ncu: " in proc.stdout and "FAILED: exit none" in proc.stdout
    assert "no-ncu-here" in proc.stdout
    doc = json.loads(out.read_text())
    assert set(doc["variants"]) == {"ncu", "concurrent", "ncu-again"}
    assert doc["variants"]["ncu-again"]["error"]
    concurrent = doc["variants"]["concurrent"]
    # Without cupti-python or a GPU it says why; with them it has the case's runs.
    assert concurrent["error"] or len(concurrent["samples"]["0"]) == 2


def test_range_profiler_structs_match_cupti_13_headers() -> None:
    assert cupti_range.struct_sizes() == cupti_range.STRUCT_SIZES
    assert set(cupti_range.MODES) == {"auto", "user"}


def test_range_profiler_host_half_builds_a_one_pass_config_for_gpu_time() -> None:
    """The host half needs libcupti but no GPU: where libcupti loads (GPU hosts, or
    NSPY_LIBCUPTI), the H100/H200 chip's config for gpu__time_duration.sum takes one pass,
    so the range variant never replays a kernel."""
    try:
        lib, _path = cupti_range.load_libcupti()
    except OSError as exc:
        pytest.skip(f"no libcupti here: {exc}")
    host = cupti_range.HostConfig(lib, "GH100", "gpu__time_duration.sum")
    try:
        assert host.passes == 1 and len(host.config) > 0
    finally:
        host.close()
    with pytest.raises(cupti_range.CuptiCallError, match="cuptiProfilerHost"):
        cupti_range.HostConfig(lib, "GH100", "no__such_metric.sum")
