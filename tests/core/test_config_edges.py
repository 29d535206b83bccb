"""Configuration is at the edge.

User settings are read in `nsight_core.plan.config` alone, by the edges that start the
engine (the CLI, the server, a cluster worker, the `@kernel` API, `run_profile_job` for a
library caller), and passed down. What a process we started finds in the environment we gave
it is read in `nsight_core.processes.sandbox.env` alone (its docstring says why). A read
anywhere else is a setting that one job could see two values of.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import shutil
from pathlib import Path

import anyio
import pytest

from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.host.ncu_install import discover_ncu, find_ncu, require_ncu
from nsight_core.host.probe import cache_dir, cache_key, probe_environment
from nsight_core.plan.config import NCU_ENV, EngineConfig
from nsight_core.processes.launch import CONTESTANT_ENV_PREFIX, contestant_env
from nspy_mcp.devices import CPU_SLOT, DeviceLocks
from nspy_mcp.executors import LocalExecutor, parse_executor

ROOT = Path(__file__).resolve().parents[2]
FALSE = shutil.which("false") or "/bin/false"

READERS = frozenset(
    {
        "nsight_core/plan/config.py",  # user settings, into EngineConfig
        "nsight_core/processes/sandbox/env.py",  # a started process's own inputs
        "nspy_mcp/cli.py",  # the commands: EngineConfig.from_env, the demo's server env
    }
)
"""The modules that may read the process's environment."""

EDGES = frozenset(
    {
        "nspy_mcp/cli.py",
        "nspy_mcp/server.py",  # build_server
        "nspy_mcp/tools.py",  # check_environment and validate_metrics called as a library
        "nspy_mcp/cluster.py",  # a Dask worker's job: that worker's host decides
        "nsight_core/nsight/api.py",  # the `@kernel` API, once a call
        "nsight_core/nsight/tools.py",  # `nsight.activate(Tool.NCU)`, which looks for ncu
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
        if _reads_environment(node) and path not in READERS
    }
    assert found == set(), "read it into EngineConfig (plan/config.py) and pass it down"
    # The readers still read: the lists name the modules that do, not stale ones.
    sources = dict(_sources())
    for path in READERS:
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


def test_ncu_discovery_and_the_probe_cache_take_their_settings_from_the_config(
    tmp_path: Path,
) -> None:
    """NSPY_NCU, PATH and NSPY_CACHE_DIR given to `EngineConfig.from_env` (not set in this
    process) decide which ncu is found, why none is, and where the probe keeps its report."""
    on_path = tmp_path / "bin" / "ncu"
    on_path.parent.mkdir()
    shutil.copy(FALSE, on_path)  # an executable that prints no version
    missing = tmp_path / "missing" / "ncu"
    cache = tmp_path / "cache"
    environ = {
        "NSPY_NCU": f" {missing} ",
        "PATH": str(on_path.parent),
        "NSPY_CACHE_DIR": str(cache),
    }
    config = EngineConfig.from_env(environ)
    assert (config.ncu, config.path, config.cache_dir) == (str(missing), str(on_path.parent), cache)
    unset = EngineConfig.from_env({})
    assert (unset.ncu, unset.path, unset.cache_dir) == ("", os.defpath, None)

    # A NSPY_NCU that does not resolve: no ncu, and the documented error names the variable;
    # the ncu on the config's PATH is listed, never used in its place.
    found = discover_ncu(config)
    assert found.used is None and found.problem == f"{NCU_ENV}={str(missing)!r} does not exist"
    assert [(c.path, c.source) for c in found.candidates] == [(str(on_path), "PATH")]
    assert find_ncu(config) is None
    with pytest.raises(NsightCoreError) as err:
        require_ncu(config)
    assert err.value.error_class is ErrorClass.PROFILER_ERROR
    assert NCU_ENV in err.value.message and NCU_ENV in (err.value.hint or "")
    assert find_ncu(dataclasses.replace(config, ncu="")) == str(on_path)  # the PATH given

    # The probe's cache is in NSPY_CACHE_DIR, under a key that tells these settings apart.
    assert cache_dir(config) == cache
    report = probe_environment(config, refresh=True)
    assert report.ncu_used is None and report.ncu_problem == found.problem
    assert (cache / f"probe-{cache_key(False, config)}.json").is_file()
    assert cache_key(False, config) != cache_key(False, dataclasses.replace(config, ncu=""))


def test_a_judge_hands_its_contestant_the_variables_its_server_prefixed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(CONTESTANT_ENV_PREFIX + "TRITON_CACHE_DIR", "/shared/triton")
    monkeypatch.setenv("TRITON_CACHE_DIR", "/judge/triton")
    assert contestant_env().get("TRITON_CACHE_DIR") == "/shared/triton"
