"""A job's environment comes from the engine's config, read once at the edge, not from
whatever this process's environment holds when the job starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nsight_core.plan.config import EngineConfig
from nsight_core.plan.job_plan import job_env
from nsight_core.processes.launch import CONTESTANT_ENV_PREFIX


def test_a_jobs_environment_is_the_configs_whatever_the_process_holds_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    triton = tmp_path / "own-triton"
    config = EngineConfig.from_env({"PYTHONPATH": "/site", "TRITON_CACHE_DIR": str(triton)})
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")  # after the config was read: no effect
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "other"))
    env = job_env("GPU-1", config)
    assert env["PYTHONPATH"].split(os.pathsep)[1:] == ["/site"]
    assert env[CONTESTANT_ENV_PREFIX + "TRITON_CACHE_DIR"] == str(triton)
    assert env["TRITON_CACHE_DIR"] != str(triton)  # the judge's cache is its own
    # load_inline builds are kept between jobs too, apart for the judge
    shared, judge = (env[p + "TORCH_EXTENSIONS_DIR"] for p in (CONTESTANT_ENV_PREFIX, ""))
    assert Path(shared).is_dir() and Path(judge).is_dir() and shared != judge
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-1"
    assert triton.is_dir() and not (tmp_path / "other").exists()


def test_the_kernel_apis_jobs_keep_the_configured_memory_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The `@kernel` API reads the engine's settings at its call: a memory limit set in the
    environment still bounds its job (a plain Python worker is over 20 MiB at once)."""
    import nsight_core as nsight  # lazy: the public surface, imported as a user does

    monkeypatch.setenv("NSPY_MCP_JOB_MEMORY", "20M")

    @nsight.analyze.kernel(configs=[(8,)], runs=2, backend="events", verbosity=0)
    def tiny(n: int) -> None:
        with nsight.annotate("a"):
            sum(range(n))

    with pytest.raises(nsight.exceptions.ProfilerException, match="NSPY_MCP_JOB_MEMORY"):
        tiny()
