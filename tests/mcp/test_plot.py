"""`nspy-mcp plot` draws speedups of a stored result and fails clearly without one."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsight_core.errors import ErrorClass
from nsight_core.plan.config import EngineConfig
from nsight_core.request import ProfileRequest
from nsight_core.results import Comparison
from nsight_core.store.result_store import ResultStore
from nspy_mcp.plot import run_plot


def _stored_result_with_speedups(root: Path) -> str:
    request = ProfileRequest(
        reference="ref.py:slow",
        candidates=["a.py:k", "b.py:k"],
        inputs="ref.py:make",
        configs=[{"n": 8}, {"n": 16}],
        backend="events",
    )
    comparisons = [
        Comparison(
            Annotation=cand,
            Baseline=request.reference,
            ConfigId=cid,
            Params=request.configs[cid],
            Metric="events__time_duration",
            Ratio=1 / speedup,
            Speedup=speedup,
            Speedup_CI95_Lower=speedup * 0.9,
            Speedup_CI95_Upper=speedup * 1.1,
            Resolvable=speedup > 1.2,
            NumPairs=5,
        )
        for cand, speedup in (("a.py:k", 2.0), ("b.py:k", 1.05))
        for cid in (0, 1)
    ]
    with ResultStore(root) as store:
        placeholder = store.create(request)
        done = placeholder.model_copy(update={"status": "done", "comparisons": comparisons})
        return store.finish(done).result_id


def test_plot_writes_a_png_of_the_speedups(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result_id = _stored_result_with_speedups(tmp_path / "store")
    out = tmp_path / "speedups.png"

    assert (
        run_plot(result_id, output=str(out), store=str(tmp_path / "store"), config=EngineConfig())
        == 0
    )

    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(out) in capsys.readouterr().out


def test_plot_of_an_unknown_result_fails_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run_plot(
        "r20261201T120000123-0a1b2c3d", output=None, store=str(tmp_path), config=EngineConfig()
    )
    assert code == 2
    assert "invalid_request" in capsys.readouterr().err


def test_plot_of_a_result_without_speedups_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request = ProfileRequest(
        reference="ref.py:slow", candidates=["a.py:k"], inputs="ref.py:make", backend="events"
    )
    with ResultStore(tmp_path) as store:
        result_id = store.fail(
            store.create(request).result_id, ErrorClass.CRASHED, "boom"
        ).result_id

    assert (
        run_plot(
            result_id, output=str(tmp_path / "x.png"), store=str(tmp_path), config=EngineConfig()
        )
        == 2
    )
    assert "no speedups" in capsys.readouterr().err
