"""The one rule every stage that doubts a row applies."""

from __future__ import annotations

from nsight_core.results import Row, marked, suspected


def _row(trust: str, reasons: list[str]) -> Row:
    return Row.model_validate(
        {
            "Annotation": "c.py:f", "ConfigId": 0, "Params": {}, "Metric": "m", "Unit": "ns",
            "AvgValue": None if trust == "failed" else 1.0, "MedianValue": None,
            "StdDev": None, "MinValue": None, "MaxValue": None,
            "NumRuns": 0 if trust == "failed" else 3, "RequestedRuns": 3,
            "RelativeStdDevPct": None, "CI95_Lower": None, "CI95_Upper": None,
            "StableMeasurement": None, "Kernel": None, "Backend": "events",
            "Evidence": "in_process", "Trust": trust, "Reasons": reasons,
        }
    )  # fmt: skip


def test_a_doubt_makes_a_row_suspicious_once_and_a_failed_row_says_it_too() -> None:
    ok = suspected(_row("ok", []), "timer rebound")
    assert (ok.Trust, ok.Reasons) == ("suspicious", ["timer rebound"])
    assert suspected(ok, "timer rebound") == ok  # not repeated
    noisy = suspected(_row("noisy", ["spread"]), "below the floor")
    assert (noisy.Trust, noisy.Reasons) == ("suspicious", ["spread", "below the floor"])
    failed = suspected(_row("failed", ["no valid run out of 3"]), "timer rebound")
    assert (failed.Trust, failed.Reasons) == ("failed", ["no valid run out of 3", "timer rebound"])


def test_marking_a_row_never_makes_it_more_trusted() -> None:
    assert marked(_row("ok", []), "a note").Trust == "ok"
    assert marked(_row("ok", []), "clock moved", "noisy").Trust == "noisy"
    assert marked(_row("suspicious", ["x"]), "clock moved", "noisy").Trust == "suspicious"
    assert marked(_row("failed", ["x"]), "clock moved", "noisy").Reasons == ["x", "clock moved"]
    once = marked(_row("ok", []), "clock moved", "noisy")
    assert marked(once, "clock moved", "noisy") == once
