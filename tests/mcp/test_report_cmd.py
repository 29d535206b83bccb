"""`nspy-mcp report FILE` on recorded reports (tests/data/README.md) and on bad input.

Runs through the real CLI entry point; the fixture-based tests skip while tests/data/ncu/
does not exist yet.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from nsight_core.collectors.extract import ActionInfo, DeviceInfo, ExtractedReport, KernelRecord
from nsight_core.errors import ErrorClass
from nsight_core.protocol import RunKey
from nsight_core.results import Row
from nspy_mcp.cli import main
from nspy_mcp.report_cmd import rows_from_report
from tests.conftest import NCU_DATA as DATA


def report_of(manifest: dict[str, Any], case: str) -> str:
    entry = manifest.get(case) or {}
    if not entry.get("report"):
        pytest.skip(f"case {case} was not recorded")
    return str(DATA / entry["report"])


def run_json(path: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["report", path, "--json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def test_missing_file_exits_2_with_a_message_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(tmp_path / "nope.ncu-rep")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "nope.ncu-rep" in captured.err


def test_unreadable_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.ncu-rep"
    bad.write_bytes(b"\x00garbage" * 100)
    assert main(["report", str(bad), "--csv"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err


def test_own_report_rows_are_grouped_by_run_key(
    manifest: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    doc = run_json(report_of(manifest, "one_kernel"), capsys)
    assert doc["foreign"] is False
    rows = [Row.model_validate(r) for r in doc["rows"]]
    assert {(r.Annotation, r.ConfigId) for r in rows} == {
        (a, c) for a in ("ref.py:add", "cand.py:add_v2") for c in (0, 1)
    }
    for row in rows:
        assert row.NumRuns == row.RequestedRuns == 3
        assert row.Unit in ("ns", "nsecond") and row.AvgValue is not None


def test_two_metrics_give_one_row_each_with_its_unit(
    manifest: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    doc = run_json(report_of(manifest, "two_metrics"), capsys)
    units = {r["Metric"]: r["Unit"] for r in doc["rows"]}
    assert units["dram__throughput.avg.pct_of_peak_sustained_elapsed"] == "%"
    assert units["gpu__time_duration.sum"] in ("ns", "nsecond")


def test_varying_kernel_count_shows_as_a_failed_row(
    manifest: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    doc = run_json(report_of(manifest, "count_varies"), capsys)
    by_config = {r["ConfigId"]: r for r in doc["rows"]}
    assert by_config[0]["ErrorClass"] == "kernel_count_mismatch"
    assert by_config[1]["Trust"] != "failed"


def test_csv_has_every_row_field_and_the_same_rows_as_json(
    manifest: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    path = report_of(manifest, "two_kernels")
    doc = run_json(path, capsys)
    assert main(["report", path, "--csv"]) == 0
    table = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert list(table[0]) == list(Row.model_fields)
    assert len(table) == len(doc["rows"])
    assert json.loads(table[0]["RawValues"]) == doc["rows"][0]["RawValues"]


def test_table_names_every_annotation(
    manifest: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", report_of(manifest, "failed_annotation")]) == 0
    out = capsys.readouterr().out
    for annotation in ("ok.py:add", "boom.py:add_twice", "partial.py:add_if_small"):
        assert annotation in out


def test_foreign_report_groups_launches_by_range_or_kernel(
    manifest: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    doc = run_json(report_of(manifest, "foreign"), capsys)
    assert doc["foreign"] is True
    expected: dict[str, int] = {}
    for e in manifest["foreign"]["expected_foreign"]:
        expected[e["annotation"]] = expected.get(e["annotation"], 0) + 1
    assert {r["Annotation"]: r["NumRuns"] for r in doc["rows"]} == expected


# --- grouping rules on hand-built extraction results (no report needed) ---------------------


def _action(seq: int, kernel: str, ranges: tuple[str, ...], value: float) -> ActionInfo:
    return ActionInfo(
        seq, kernel, kernel, "kernel", ranges, None, {"gpu__time_duration.sum": (value, "ns")}
    )


def test_foreign_launches_group_by_innermost_range_then_kernel() -> None:
    outer = ("<default domain>@outer/",)
    actions = []
    for i in range(3):
        actions += [
            _action(3 * i, "add_kernel", outer, 10.0 + i),
            _action(3 * i + 1, "scale_kernel", outer, 5.0),
            _action(3 * i + 2, "copy_kernel", (), 7.0),
        ]
    rep = ExtractedReport(
        path="x.ncu-rep",
        metrics=("gpu__time_duration.sum",),
        records=(),
        kernels={},
        device=DeviceInfo(display_name="GPU"),
        actions=tuple(actions),
    )
    rows = {r.Annotation: r for r in rows_from_report(rep)}
    assert set(rows) == {"outer: add_kernel", "outer: scale_kernel", "copy_kernel"}
    assert rows["outer: add_kernel"].RawValues == [10.0, 11.0, 12.0]
    assert all(r.NumRuns == 3 and r.GPU == "GPU" for r in rows.values())


def test_own_report_sums_durations_and_flags_missing_run_indices() -> None:
    recs = []
    for run in (0, 2):  # run 1 has no kernels in the report
        key = RunKey("a", 0, run)
        recs += [
            KernelRecord(key, "k1", "k1", "gpu__time_duration.sum", 1.0, "ns", 2 * run),
            KernelRecord(key, "k2", "k2", "gpu__time_duration.sum", 2.0, "ns", 2 * run + 1),
        ]
    actions = tuple(
        ActionInfo(r.seq, r.kernel, r.kernel, "kernel", (f"nspy@{r.key.range_name()}",), r.key)
        for r in recs
    )
    kernels = {RunKey("a", 0, 0): ("k1", "k2"), RunKey("a", 0, 2): ("k1", "k2")}
    rep = ExtractedReport(
        "x.ncu-rep", ("gpu__time_duration.sum",), tuple(recs), kernels, DeviceInfo(), actions
    )
    [row] = rows_from_report(rep)
    assert row.RawValues == [None, None, None]  # run 1 launched nothing: counts differ
    assert row.ErrorClass is ErrorClass.KERNEL_COUNT_MISMATCH
