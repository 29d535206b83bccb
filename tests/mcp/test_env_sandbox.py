"""`nspy-mcp env` says which process controls are in force (issue 11), as a person runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from nsight_core.host.probe import EnvironmentReport
from nsight_core.processes.sandbox import landlock_abi


def _env(tmp_path: Path, *args: str, memory: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NSPY_CACHE_DIR=str(tmp_path / "cache"), NSPY_MCP_JOB_MEMORY=memory)
    return subprocess.run(
        [sys.executable, "-m", "nspy_mcp", "env", *args],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip


def test_env_json_reports_the_sandbox_mechanisms_and_the_memory_limit(tmp_path: Path) -> None:
    p = _env(tmp_path, "--json", memory="3G")
    assert p.returncode == 0, p.stderr
    sandbox = EnvironmentReport.model_validate_json(p.stdout).sandbox
    assert sandbox is not None
    assert sandbox.memory_limit_bytes == 3 << 30
    assert sandbox.memory_limit_source == "NSPY_MCP_JOB_MEMORY=3G"
    assert sandbox.landlock_abi == landlock_abi()
    assert not sandbox.server_protected
    if sys.platform.startswith("linux"):
        assert "PR_SET_PDEATHSIG" in sandbox.parent_death
        assert "subreaper" in sandbox.descendants


def test_env_text_names_the_mechanisms_and_a_cached_report_keeps_them_current(
    tmp_path: Path,
) -> None:
    assert _env(tmp_path, memory="3G").returncode == 0
    p = _env(tmp_path, memory="off")  # the second run reads the cached probe
    assert p.returncode == 0, p.stderr
    lines = [line for line in p.stdout.splitlines() if line.startswith("sandbox")]
    assert len(lines) == 1 and "dies with server" in lines[0]
    assert "memory limit none (NSPY_MCP_JOB_MEMORY=off)" in p.stdout
