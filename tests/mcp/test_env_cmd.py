"""`nspy-mcp env` and `nspy-mcp metrics` through a real subprocess, as a person runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nsight_core.host.catalog import shipped_catalogs
from nsight_core.host.probe import EnvironmentReport

HAVE_GH100 = any("gh100" in c for c in shipped_catalogs().values())


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NSPY_CACHE_DIR=str(tmp_path / "cache"))
    return subprocess.run(
        [sys.executable, "-m", "nspy_mcp", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_env_json_is_an_environment_report(tmp_path: Path) -> None:
    p = _run(["env", "--json"], tmp_path)
    assert p.returncode == 0, p.stderr
    report = EnvironmentReport.model_validate_json(p.stdout)
    assert {b.name for b in report.backends} == {"ncu", "cupti", "events"}


def test_env_text_names_every_backend(tmp_path: Path) -> None:
    p = _run(["env"], tmp_path)
    assert p.returncode == 0, p.stderr
    for name in ("ncu", "cupti", "events"):
        assert f"backend   {name}" in p.stdout


def test_metrics_with_unknown_chip_exits_2_with_the_error_class(tmp_path: Path) -> None:
    p = _run(["metrics", "gpu__time_duration.sum", "--chip", "zz999", "--json"], tmp_path)
    assert p.returncode == 2
    assert json.loads(p.stdout)["error_class"] == "invalid_request"


@pytest.mark.skipif(not HAVE_GH100, reason="no shipped gh100 catalog yet")
def test_metrics_exit_1_on_a_typo_and_0_when_all_valid(tmp_path: Path) -> None:
    bad = _run(["metrics", "gpu__time_duraton.sum", "--chip", "gh100"], tmp_path)
    assert bad.returncode == 1 and "gpu__time_duration.sum" in bad.stdout
    good = _run(["metrics", "gpu__time_duration.sum", "--chip", "gh100"], tmp_path)
    assert good.returncode == 0, good.stdout


def test_env_text_says_not_installed_once_per_package(tmp_path: Path) -> None:
    p = _run(["env"], tmp_path)
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(("ncu-report", "cupti-python"))]
    assert len(lines) == 2
    for line in lines:
        assert line.count("not installed") <= 1, line
        assert ": " in line and not line.rstrip().endswith(":"), line


def test_package_state_keeps_version_and_note_and_drops_the_repeat() -> None:
    from nsight_core.host.probe import PackageStatus
    from nspy_mcp.env_cmd import _package_state

    missing = PackageStatus(name="x", installed=False, note="not installed: pip install x")
    assert _package_state(missing) == "not installed: pip install x"
    there = PackageStatus(name="x", installed=True, version="1.2", note="reader 1.2 >= ncu 1.1")
    assert _package_state(there) == "1.2: reader 1.2 >= ncu 1.1"
    bare = PackageStatus(name="x", installed=False)
    assert _package_state(bare) == "not installed"


@pytest.mark.skipif(not HAVE_GH100, reason="no shipped gh100 catalog yet")
def test_metrics_hints_name_the_cli_flag_not_the_tool_argument(tmp_path: Path) -> None:
    for args in (
        ["metrics", "gpu__time_duration.sum"],
        ["metrics", "gpu__time_duration.sum", "--json"],
    ):
        p = _run(args, tmp_path)
        assert p.returncode == 0, p.stderr
        assert "chip=" not in p.stdout
    if '"chip_source": "default"' in p.stdout:  # no GPU here: the note says how to choose
        assert "pass --chip" in p.stdout
