"""The speedup chart names what it could not draw and titles panels for people."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt

from nsight_core.results import Comparison, ProfileResult, Provenance
from nspy_mcp.plot import metric_title, speedup_figure


def _comparison(cand: str, speedup: float | None, reasons: list[str]) -> Comparison:
    return Comparison(
        Annotation=cand,
        Baseline="ref.py:slow",
        ConfigId=0,
        Params={"n": 8},
        Metric="events__time_duration",
        Ratio=None if speedup is None else 1 / speedup,
        Speedup=speedup,
        Speedup_CI95_Lower=None if speedup is None else speedup * 0.9,
        Speedup_CI95_Upper=None if speedup is None else speedup * 1.1,
        Resolvable=None if speedup is None else True,
        NumPairs=0 if speedup is None else 5,
        Reasons=reasons,
    )


def _figure_texts(fig: Any) -> str:
    return "\n".join(t.get_text() for t in fig.texts)


def test_a_candidate_without_speedup_is_named_with_its_reason() -> None:
    result = ProfileResult(
        result_id="r1",
        status="done",
        created_at="2026-12-02T00:00:00Z",
        comparisons=[
            _comparison("a.py:k", 2.0, []),
            _comparison("b.py:k", None, ["candidate failed: runtime_error"]),
        ],
        provenance=Provenance(backend="events", nspy_version="0"),
    )
    fig = speedup_figure(result)
    try:
        assert "b.py:k @ n=8: candidate failed: runtime_error" in _figure_texts(fig)
        assert fig.axes[0].get_title() == "time per call (events backend)"
    finally:
        plt.close(fig)


def test_metric_titles_are_words_and_unknown_metrics_stay_as_named() -> None:
    assert metric_title("events__time_duration", "events") == "time per call (events backend)"
    assert metric_title("gpu__time_duration.sum", "ncu") == "GPU time per call (ncu backend)"
    assert metric_title("dram__bytes.sum", None) == "dram__bytes.sum"
