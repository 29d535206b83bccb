"""`nspy-mcp demo`: the whole loop through a real stdio server, and how it picks a backend."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nsight_core.host.probe import probe_environment
from nsight_core.plan.config import EngineConfig
from nspy_mcp.demo import DemoError, choose_plan, run_demo


def test_the_demo_runs_the_loop_over_stdio_and_shows_an_incorrect_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run_demo(store=str(tmp_path), backend="events", environ=os.environ)

    out = capsys.readouterr().out
    assert code == 0, out
    for step in ("check_environment", "validate_metrics", "profile_candidates", "read_results"):
        assert step in out
    assert "softmax_vectorized passed" in out
    assert "softmax_wrong_axis incorrect" in out
    assert "speedup softmax_vectorized vs softmax_reference" in out
    assert any(p.name.startswith("r") for p in tmp_path.iterdir())


def test_without_a_gpu_the_demo_says_so_and_uses_events_on_cpu() -> None:
    env = probe_environment(EngineConfig.from_env())
    if env.gpus:
        pytest.skip("this host has a GPU")
    plan = choose_plan(env, "auto")
    assert (plan.backend, plan.kernels) == ("events", "numpy")
    assert "no GPU" in plan.why
    with pytest.raises(DemoError, match="needs a GPU"):
        choose_plan(env, "ncu")
