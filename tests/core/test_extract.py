"""Extraction from real reports recorded by tools/record_fixtures.py (tests/data/README.md).

Expectations come from manifest.json, i.e. from what the child workload says it launched in
each range, not from the report itself. The report-based tests skip while tests/data/ncu/
does not exist yet; the error-path tests always run.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nsight_core.collectors.extract import RANGE_KERNEL, ExtractedReport, extract_records
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.protocol import RunKey
from nsight_core.request import KernelsSpec
from nsight_core.results import Failure
from nsight_core.rows.aggregate import (
    aggregate_rows,
    compare_to_reference,
    reduce_runs,
)
from tests.conftest import NCU_DATA as DATA

T = "gpu__time_duration.sum"
PCT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"


def load(manifest: dict[str, Any], case: str) -> tuple[dict[str, Any], ExtractedReport]:
    entry = manifest[case]
    if not entry.get("report"):
        pytest.skip(f"case {case} was not recorded (ok={entry.get('ok')})")
    return entry, extract_records(DATA / entry["report"], entry["metrics"])


def expected_keys(entry: dict[str, Any]) -> list[RunKey]:
    return [RunKey(e["annotation"], e["config_id"], e["run"]) for e in entry["expected"]]


def failures(entry: dict[str, Any]) -> list[Failure]:
    return [
        Failure(
            Annotation=f["annotation"],
            ConfigId=f["config_id"],
            Run=f["run"],
            ErrorClass=ErrorClass(f["error_class"]),
            Error=f["error"],
        )
        for f in entry.get("failed_runs", [])
    ]


OWN_CASES = [
    "one_kernel",
    "two_kernels",
    "range_replay",
    "failed_annotation",
    "two_metrics",
    "count_varies",
]


@pytest.mark.parametrize("case", OWN_CASES)
def test_every_kernel_is_attributed_to_the_run_that_launched_it(
    manifest: dict[str, Any], case: str
) -> None:
    entry, rep = load(manifest, case)
    for e in entry["expected"]:
        key = RunKey(e["annotation"], e["config_id"], e["run"])
        assert list(rep.kernels.get(key, ())) == e["kernels"], e["range_name"]
    assert set(rep.kernels) <= set(expected_keys(entry))
    assert all(a.key is not None for a in rep.actions)
    assert not rep.foreign


@pytest.mark.parametrize("case", OWN_CASES)
def test_records_carry_one_value_per_kernel_and_metric(manifest: dict[str, Any], case: str) -> None:
    entry, rep = load(manifest, case)
    launched = sum(len(e["kernels"]) for e in entry["expected"])
    assert len(rep.records) == launched * len(entry["metrics"])
    for rec in rep.records:
        assert rec.value is not None and math.isfinite(rec.value), rec
        if rec.metric == T:
            assert rec.unit in ("ns", "nsecond") and rec.value > 0


def test_device_attributes_come_from_the_report(manifest: dict[str, Any]) -> None:
    entry, rep = load(manifest, "one_kernel")
    assert rep.device.display_name == entry["gpu"]
    assert rep.device.sm_count is not None and rep.device.sm_count > 0
    assert rep.device.compute_capability is not None
    assert rep.device.compute_capability.count(".") == 1


def test_range_replay_gives_one_range_result_per_run(manifest: dict[str, Any]) -> None:
    entry, rep = load(manifest, "range_replay")
    for key in expected_keys(entry):
        assert rep.kernels[key] == (RANGE_KERNEL,)
    assert {a.workload for a in rep.actions} == {"range"}
    assert {r.kernel for r in rep.records} == {RANGE_KERNEL}


def test_two_metrics_keep_their_own_units(manifest: dict[str, Any]) -> None:
    _, rep = load(manifest, "two_metrics")
    units = {r.metric: r.unit for r in rep.records}
    assert units[T] in ("ns", "nsecond")
    assert units[PCT] == "%"
    assert all(0.0 <= r.value <= 100.0 for r in rep.records if r.metric == PCT and r.value)


def test_failed_and_empty_runs_are_reported_not_shifted(manifest: dict[str, Any]) -> None:
    entry, rep = load(manifest, "failed_annotation")
    rv = reduce_runs(
        rep.records,
        expected_keys(entry),
        entry["metrics"],
        KernelsSpec(combine="sum"),
        failures=failures(entry),
    )
    rows = {(r.Annotation, r.ConfigId): r for r in aggregate_rows(rv)}
    boom = rows[("boom.py:add_twice", 0)]
    assert boom.RawValues[1] is None and boom.NumRuns == 2
    assert boom.ErrorClass is ErrorClass.RUNTIME_ERROR
    assert rows[("boom.py:add_twice", 1)].NumRuns == 3
    assert rows[("partial.py:add_if_small", 1)].ErrorClass is ErrorClass.NO_KERNELS
    assert rows[("partial.py:add_if_small", 0)].NumRuns == 3
    assert rows[("ok.py:add", 0)].ErrorClass is None


@pytest.mark.parametrize("combine", ["sum", None], ids=["sum", "default"])
def test_varying_kernel_count_is_a_mismatch_only_where_it_varies(
    manifest: dict[str, Any], combine: str | None
) -> None:
    entry, rep = load(manifest, "count_varies")
    spec = KernelsSpec(combine=combine)
    rv = reduce_runs(rep.records, expected_keys(entry), entry["metrics"], spec)
    rows = {r.ConfigId: r for r in aggregate_rows(rv)}
    assert rows[0].ErrorClass is ErrorClass.KERNEL_COUNT_MISMATCH
    assert rows[1].ErrorClass is None and rows[1].NumRuns == 3
    [failure] = rv.failures
    assert "scale_kernel" in failure.Error


def test_a_recorded_two_kernel_call_is_summed_by_default_and_the_row_says_so(
    manifest: dict[str, Any],
) -> None:
    entry, rep = load(manifest, "two_kernels")
    rv = reduce_runs(rep.records, expected_keys(entry), entry["metrics"], KernelsSpec())
    [row] = aggregate_rows(rv)
    per_run: dict[int, float] = {}
    for rec in rep.records:
        assert rec.value is not None
        per_run[rec.key.run] = per_run.get(rec.key.run, 0.0) + rec.value
    assert row.RawValues == pytest.approx([per_run[run] for run in sorted(per_run)])
    assert row.ErrorClass is None and row.NumRuns == len(per_run)
    assert row.Kernel == "add_kernel|scale_kernel"
    assert any(r.startswith("2 kernels per call, summed") for r in row.Reasons)


def test_recorded_reference_and_candidate_compare_per_config(manifest: dict[str, Any]) -> None:
    entry, rep = load(manifest, "one_kernel")
    rv = reduce_runs(rep.records, expected_keys(entry), entry["metrics"], KernelsSpec())
    cmps = compare_to_reference(rv, entry["reference"], entry["candidates"])
    assert [c.ConfigId for c in cmps] == [0, 1]
    for c in cmps:
        assert c.NumPairs == 3 and c.Speedup is not None and c.Speedup > 0


def test_a_metric_absent_from_the_report_gives_null_values(manifest: dict[str, Any]) -> None:
    entry, _ = load(manifest, "one_kernel")
    rep = extract_records(DATA / entry["report"], ["nspy__not_collected.sum"])
    assert rep.records and all(r.value is None for r in rep.records)


def test_foreign_report_has_no_run_keys(manifest: dict[str, Any]) -> None:
    entry = manifest.get("foreign")
    if not entry or not entry.get("report"):
        pytest.skip("foreign case not recorded")
    rep = extract_records(DATA / entry["report"], entry["metrics"])
    assert rep.foreign and rep.records == ()
    assert [a.kernel for a in rep.actions] == [e["kernel"] for e in entry["expected_foreign"]]


# --- always-run error paths -----------------------------------------------------------------


def test_missing_report_is_a_profiler_error(tmp_path: Path) -> None:
    with pytest.raises(NsightCoreError) as err:
        extract_records(tmp_path / "none.ncu-rep", [T])
    assert err.value.error_class is ErrorClass.PROFILER_ERROR


def test_unreadable_report_is_a_profiler_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.ncu-rep"
    bad.write_bytes(b"not a report\x00" * 64)
    with pytest.raises(NsightCoreError) as err:
        extract_records(bad, [T])
    assert err.value.error_class is ErrorClass.PROFILER_ERROR


def test_the_shipped_warmup_report_is_the_recorded_fixture_and_warms_the_reader() -> None:
    """`nspy-mcp serve` reads the report shipped in the package once at start, so its first
    result does not pay for ncu_report's import and set-up. In a fresh interpreter: the file is
    the recorded fixture, the warm-up leaves the reader loaded, and its three ranges read."""
    from nsight_core.collectors.extract import WARMUP_REPORT

    assert WARMUP_REPORT.read_bytes() == (DATA / "range_replay.ncu-rep").read_bytes()
    code = (
        "import sys\n"
        "from nsight_core.collectors.extract import WARMUP_REPORT, extract_records, warm_report_reader\n"
        "assert 'ncu_report' not in sys.modules\n"
        "warm_report_reader()\n"
        "assert 'ncu_report' in sys.modules\n"
        "print(sorted({a.workload for a in extract_records(WARMUP_REPORT).actions}),"
        " len(extract_records(WARMUP_REPORT).actions))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split() == ["['range']", "3"]


def test_the_reader_warmup_without_ncu_report_does_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the reader the warm-up is silent: the job's own read says what is missing."""
    from nsight_core.collectors.extract import WARMUP_REPORT, warm_report_reader

    monkeypatch.setitem(sys.modules, "ncu_report", None)  # import ncu_report -> ImportError
    warm_report_reader()  # raises nothing
    with pytest.raises(NsightCoreError, match="ncu_report package is not importable"):
        extract_records(WARMUP_REPORT)
