"""Configuration is at the edge.

User settings are read in `nsight_core.plan.config` alone, by the edges that start the
engine (the CLI, the server, a cluster worker, the `@kernel` API, `run_profile_job` for a
library caller), and passed down. What a process we started finds in the environment we gave
it is read in `nsight_core.processes.sandbox.env` alone (its docstring says why). A read
anywhere else is a setting that one job could see two values of.
"""

from __future__ import annotations

import ast
from pathlib import Path

import anyio
import pytest

from nsight_core.plan.config import EngineConfig
from nsight_core.processes.launch import CONTESTANT_ENV_PREFIX, contestant_env
from nspy_mcp.devices import CPU_SLOT, DeviceLocks
from nspy_mcp.executors import LocalExecutor, parse_executor

ROOT = Path(__file__).resolve().parents[2]

READERS = frozenset(
    {
        "nsight_core/plan/config.py",  # user settings, into EngineConfig
        "nsight_core/processes/sandbox/env.py",  # a started process's own inputs
        "nspy_mcp/cli.py",  # the commands: EngineConfig.from_env, the demo's server env
    }
)
"""The modules that may read the process's environment."""

NOT_YET_MOVED = frozenset(
    {
        # The probe and ncu discovery still read NSPY_NCU, PATH, CUDA_VISIBLE_DEVICES and
        # NSPY_CACHE_DIR: their deep callers (the backends' preflight and wrap, the
        # catalogs, request defaults) have no config to pass yet. Still to move (issue 44).
        "nsight_core/host/ncu_install.py",
        "nsight_core/host/probe.py",
    }
)

EDGES = frozenset(
    {
        "nspy_mcp/cli.py",
        "nspy_mcp/server.py",  # build_server, and check_environment called as a library
        "nspy_mcp/cluster.py",  # a Dask worker's job: that worker's host decides
        "nsight_core/nsight/api.py",  # the `@kernel` API, once a call
        "nsight_core/pipeline.py",  # run_profile_job without a config: once a call
    }
)
"""The modules that may call `EngineConfig.from_env`."""


def _sources() -> list[tuple[str, ast.AST]]:
    paths = sorted((ROOT / "nsight_core").rglob("*.py")) + sorted((ROOT / "nspy_mcp").rglob("*.py"))
    return [(p.relative_to(ROOT).as_posix(), ast.parse(p.read_text("utf-8"))) for p in paths]


def _reads_environment(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id == "os":
            return node.attr in {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}
        base = node.value
        named = isinstance(base, ast.Name) and base.id == "environ"
        return named and node.attr in {"get", "pop", "items", "setdefault"}
    if isinstance(node, ast.ImportFrom) and node.module == "os":
        return any(a.name in {"environ", "environb", "getenv", "getenvb"} for a in node.names)
    return False


def test_the_environment_is_read_in_the_config_the_cli_and_the_child_side_module() -> None:
    found = {
        f"{path}:{getattr(node, 'lineno', 0)}"
        for path, tree in _sources()
        for node in ast.walk(tree)
        if _reads_environment(node) and path not in READERS | NOT_YET_MOVED
    }
    assert found == set(), "read it into EngineConfig (plan/config.py) and pass it down"
    # The readers still read: the lists name the modules that do, not stale ones.
    sources = dict(_sources())
    for path in READERS | NOT_YET_MOVED:
        assert any(_reads_environment(n) for n in ast.walk(sources[path])), path


def test_engine_config_from_env_is_called_at_the_edges_only() -> None:
    callers = {
        path
        for path, tree in _sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "from_env"
    }
    assert callers - EDGES == set()
    assert "nsight_core/nsight/function_job.py" not in callers


def test_the_settings_moved_into_the_config_are_read_from_it(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    config = EngineConfig.from_env(
        {
            "NSPY_MCP_LOCK_DIR": f" {locks} ",
            "NSPY_MCP_EXECUTOR": "dask://head:8786",
            "CUDA_VISIBLE_DEVICES": "",
        }
    )
    assert config.lock_dir == locks
    assert parse_executor(config.executor) == "tcp://head:8786"
    unset = EngineConfig.from_env({})
    assert (unset.lock_dir, unset.executor, unset.visible_devices) == (None, "", None)

    # The executor's device locks take the directory and the visible GPUs from the config:
    # an empty CUDA_VISIBLE_DEVICES leaves the CPU slot alone, and its lock file is there.
    executor = LocalExecutor.for_store(tmp_path / "store", config)

    async def take() -> None:
        async with executor.locks.take(None, lambda _: None) as slot:
            assert slot == CPU_SLOT
            assert (locks / f"{CPU_SLOT.key}.lock").exists()

    anyio.run(take)
    assert executor.locks.known_slots() == [CPU_SLOT]
    assert DeviceLocks(visible="-1").known_slots() == []  # read on first use, not before


def test_a_judge_hands_its_contestant_the_variables_its_server_prefixed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(CONTESTANT_ENV_PREFIX + "TRITON_CACHE_DIR", "/shared/triton")
    monkeypatch.setenv("TRITON_CACHE_DIR", "/judge/triton")
    assert contestant_env().get("TRITON_CACHE_DIR") == "/shared/triton"
