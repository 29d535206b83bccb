"""`nspy-mcp report FILE`: rows from any existing .ncu-rep, on a machine without a GPU.

Reports from our worker carry `RunKey` ranges in NVTX domain "nspy"; their rows are grouped
by those keys exactly as a profile job would group them. A foreign report (any other ncu
run) has no such keys, so each launch counts as one run of an annotation named after its
innermost NVTX range, or after its kernel when it ran outside any range. A range holding
several different kernels gives one annotation per kernel ("range: kernel"), because runs
of different kernels are not samples of one quantity.

Without a request to say how to fold several kernels of one call, the rule of a request
that leaves `kernels.combine` out holds: times and counts (a `.sum` roll-up) are summed and
any other metric needs one kernel per call.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nsight_core.collectors.extract import (
    ActionInfo,
    ExtractedReport,
    KernelRecord,
    extract_records,
)
from nsight_core.diagnosis import Diagnosis
from nsight_core.errors import NsightCoreError
from nsight_core.protocol import RunKey
from nsight_core.request import KernelsSpec
from nsight_core.results import Row
from nsight_core.rows.aggregate import (
    RowContext,
    RunValues,
    aggregate_rows,
    reduce_runs,
)
from nsight_core.rows.diagnose import diagnose_run

FORMATS = ("table", "json", "csv")
_TABLE_COLUMNS = (
    "Annotation",
    "ConfigId",
    "Metric",
    "Unit",
    "AvgValue",
    "StdDev",
    "CI95",
    "Runs",
    "Kernel",
    "Trust",
)


def _own_run_values(report: ExtractedReport) -> RunValues:
    """Expected runs: every run index up to the highest seen per (annotation, config)."""
    highest: dict[tuple[str, int], int] = {}
    for key in report.kernels:
        group = (key.annotation, key.config_id)
        highest[group] = max(highest.get(group, -1), key.run)
    expected = [RunKey(a, c, r) for (a, c), top in highest.items() for r in range(top + 1)]
    return reduce_runs(report.records, expected, report.metrics, KernelsSpec())


def _foreign_label(action: ActionInfo) -> str | None:
    if not action.nvtx_ranges:
        return None
    label = action.nvtx_ranges[-1].removesuffix("/")
    return label.removeprefix("<default domain>@")


def _foreign_run_values(report: ExtractedReport) -> RunValues:
    kernels_in: dict[str, set[str]] = {}
    for act in report.actions:
        label = _foreign_label(act)
        if label is not None:
            kernels_in.setdefault(label, set()).add(act.kernel)
    runs: dict[str, int] = {}
    records: list[KernelRecord] = []
    for act in report.actions:
        label = _foreign_label(act)
        if label is None:
            annotation = act.kernel
        elif len(kernels_in[label]) > 1:
            annotation = f"{label}: {act.kernel}"
        else:
            annotation = label
        key = RunKey(annotation, 0, runs.get(annotation, 0))
        runs[annotation] = key.run + 1
        records += [
            KernelRecord(key, act.kernel, act.demangled, m, value, unit, act.seq)
            for m, (value, unit) in act.values.items()
        ]
    expected = [RunKey(a, 0, r) for a, n in runs.items() for r in range(n)]
    return reduce_runs(records, expected, report.metrics, KernelsSpec())


def rows_from_report(report: ExtractedReport) -> list[Row]:
    """Rows of an extracted report, ours or foreign (see the module docstring)."""
    run_values = _foreign_run_values(report) if report.foreign else _own_run_values(report)
    replay = "range" if any(a.workload == "range" for a in report.actions) else "kernel"
    ctx = RowContext(backend="ncu", gpu=report.device.display_name, replay_mode=replay)
    return aggregate_rows(run_values, ctx)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _table_cells(row: Row) -> dict[str, str]:
    ci = (
        "-"
        if row.CI95_Lower is None or row.CI95_Upper is None
        else f"[{_num(row.CI95_Lower)}, {_num(row.CI95_Upper)}]"
    )
    return {
        "Annotation": row.Annotation,
        "ConfigId": str(row.ConfigId),
        "Metric": row.Metric,
        "Unit": row.Unit or "-",
        "AvgValue": _num(row.AvgValue),
        "StdDev": _num(row.StdDev),
        "CI95": ci,
        "Runs": f"{row.NumRuns}/{row.RequestedRuns}",
        "Kernel": row.Kernel or "-",
        "Trust": row.Trust,
    }


def diagnoses_from_report(path: Path, rows: Sequence[Row]) -> list[Diagnosis]:
    """Diagnoses of our own report when it carries the diagnose metrics; else none.

    A foreign report has no runs of ours to group, and one recorded without ``diagnose``
    has no speed-of-light numbers, so neither gets a diagnosis (nothing without evidence).
    """
    groups = list(dict.fromkeys((r.Annotation, r.ConfigId) for r in rows))
    job = diagnose_run(path, diagnose=True, groups=groups, configs=[], floor_events=[], gpu=None)
    return [d for d in job.diagnoses if d.ComputeThroughputPct is not None]


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} %"


def _write_diagnoses(diagnoses: Sequence[Diagnosis]) -> None:
    for d in diagnoses:
        head = (
            f"diagnosis {d.Annotation} c{d.ConfigId}: {d.Bound or 'unknown'}-bound; compute "
            f"{_pct(d.ComputeThroughputPct)}, memory {_pct(d.MemoryThroughputPct)}, DRAM "
            f"{_pct(d.DramPct)}, tensor {_pct(d.TensorPipePct)}"
        )
        if d.Headroom is not None:
            head += f"; at most {d.Headroom:.2f}x by {d.HeadroomResource}"
        sys.stdout.write(head + "\n")
        if d.NextStep:
            sys.stdout.write(f"  next: {d.NextStep}\n")
        for r in d.Rules:
            if r.Severity in ("optimization", "warning", "error"):
                sys.stdout.write(f"  ncu {r.Rule} ({r.Severity}): {r.Title}\n")


def _write_table(report: ExtractedReport, rows: Sequence[Row]) -> None:
    kind = "foreign report" if report.foreign else "nspy report"
    sys.stdout.write(
        f"{report.path}: {kind}, {len(report.actions)} results, "
        f"GPU {report.device.display_name or 'unknown'}\n"
    )
    cells = [_table_cells(r) for r in rows]
    widths = {c: max([len(c), *(len(x[c]) for x in cells)]) for c in _TABLE_COLUMNS}
    sys.stdout.write("  ".join(c.ljust(widths[c]) for c in _TABLE_COLUMNS).rstrip() + "\n")
    for x in cells:
        sys.stdout.write("  ".join(x[c].ljust(widths[c]) for c in _TABLE_COLUMNS).rstrip() + "\n")
    for row in rows:
        if row.Trust != "ok":
            why = "; ".join([*([row.Error] if row.Error else []), *row.Reasons])
            sys.stdout.write(f"- {row.Annotation} c{row.ConfigId} {row.Metric}: {why}\n")


def _write_json(
    report: ExtractedReport, rows: Sequence[Row], diagnoses: Sequence[Diagnosis]
) -> None:
    doc = {
        "report": report.path,
        "foreign": report.foreign,
        "gpu": report.device.display_name,
        "metrics": list(report.metrics),
        "rows": [r.model_dump(mode="json") for r in rows],
        "diagnoses": [d.model_dump(mode="json") for d in diagnoses],
    }
    sys.stdout.write(json.dumps(doc, indent=1, allow_nan=False) + "\n")


def _csv_value(value: Any) -> Any:
    if isinstance(value, list | dict):
        return json.dumps(value, allow_nan=False)
    return "" if value is None else value


def rows_csv(rows: Sequence[Row]) -> str:
    """Rows as CSV, one column per `Row` field; lists and dicts as JSON (RawValues too).

    Also a stored result's `rows.csv` resource (nspy_mcp/resources.py)."""
    out = io.StringIO()
    fields = list(Row.model_fields)
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        dumped = row.model_dump(mode="json")
        writer.writerow({f: _csv_value(dumped[f]) for f in fields})
    return out.getvalue()


def run_report(path: str, *, fmt: str, metrics: Sequence[str] | None = None) -> int:
    """Write rows of the report at ``path`` to stdout; 2 (and a stderr line) if unreadable."""
    if fmt not in FORMATS:
        sys.stderr.write(f"nspy-mcp report: format {fmt!r} is not one of {', '.join(FORMATS)}\n")
        return 2
    if not Path(path).is_file():
        sys.stderr.write(f"nspy-mcp report: {path}: no such file\n")
        return 2
    try:
        report = extract_records(path, metrics)
    except NsightCoreError as exc:
        sys.stderr.write(f"nspy-mcp report: {path}: {exc}\n")
        return 2
    rows = rows_from_report(report)
    diagnoses = [] if report.foreign else diagnoses_from_report(Path(path), rows)
    if fmt == "json":
        _write_json(report, rows, diagnoses)
    elif fmt == "csv":
        sys.stdout.write(rows_csv(rows))
    else:
        _write_table(report, rows)
        _write_diagnoses(diagnoses)
    return 0
