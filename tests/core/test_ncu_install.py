"""nsight_core.host.ncu_install: one ncu discovery policy that the probe and the runner share,
the version parser and the GPU -> chip table.

The "ncu" executables here are copies of the system's ``false`` (a real program that prints
nothing and exits 1): discovery only needs executable files, and the probe then honestly
reports that they gave no version. A typo in ``NSPY_NCU``, a missing path and a file
without the execute bit are the broken cases.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from nsight_core.collectors.ncu import find_ncu, ncu_version, require_ncu
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.host import probe
from nsight_core.host.ncu_install import (
    chip_for_gpu,
    discover_ncu,
    parse_list_chips,
    parse_ncu_version,
    query_ncu_version,
)
from nsight_core.pipeline import preflight
from nsight_core.plan.config import NCU_ENV, EngineConfig
from nsight_core.request import ProfileRequest
from nspy_mcp.env_cmd import format_environment

FALSE = shutil.which("false")
TOOL = Path(__file__).resolve().parents[2] / "tools" / "record_catalogs.py"


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NSPY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(probe, "_memory_cache", {})
    monkeypatch.delenv(NCU_ENV, raising=False)


def _exe(path: Path) -> Path:
    """A real executable at ``path`` (a copy of ``false``)."""
    assert FALSE is not None
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(FALSE, path)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _two_ncus_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    first, second = _exe(tmp_path / "a" / "ncu"), _exe(tmp_path / "b" / "ncu")
    monkeypatch.setenv("PATH", os.pathsep.join([str(first.parent), str(second.parent)]))
    return first, second


def _setup(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """Arrange one discovery case; the path that must be used, or None."""
    first, _ = _two_ncus_on_path(tmp_path, monkeypatch)
    if case == "path only":
        return str(first)
    if case == "nothing":
        empty = tmp_path / "empty"
        empty.mkdir()
        monkeypatch.setenv("PATH", str(empty))
        return None
    if case == "NSPY_NCU path":
        chosen = _exe(tmp_path / "opt" / "ncu-2025")
        monkeypatch.setenv(NCU_ENV, str(chosen))
        return str(chosen)
    if case == "NSPY_NCU name on PATH":
        chosen = _exe(tmp_path / "b" / "ncu-2025")
        monkeypatch.setenv(NCU_ENV, "ncu-2025")
        return str(chosen)
    if case == "NSPY_NCU typo":
        monkeypatch.setenv(NCU_ENV, "ncu-typo")
    elif case == "NSPY_NCU missing path":
        monkeypatch.setenv(NCU_ENV, str(tmp_path / "missing" / "ncu"))
    elif case == "NSPY_NCU not executable":
        plain = tmp_path / "plain" / "ncu"
        plain.parent.mkdir()
        plain.write_text("")
        monkeypatch.setenv(NCU_ENV, str(plain))
    return None


CASES = [
    "path only",
    "nothing",
    "NSPY_NCU path",
    "NSPY_NCU name on PATH",
    "NSPY_NCU typo",
    "NSPY_NCU missing path",
    "NSPY_NCU not executable",
]


@pytest.mark.parametrize("case", CASES)
def test_probe_and_runner_agree_on_the_ncu_used_and_why_there_is_none(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _setup(case, tmp_path, monkeypatch)
    report = probe.probe_environment(EngineConfig.from_env(), refresh=True)
    assert find_ncu(EngineConfig.from_env()) == report.ncu_used == expected
    assert [n.path for n in report.ncu if n.used] == ([expected] if expected else [])
    if expected is not None:
        assert require_ncu(EngineConfig.from_env()) == expected and report.ncu_problem is None
        return
    with pytest.raises(NsightCoreError) as err:
        require_ncu(EngineConfig.from_env())
    assert err.value.error_class is ErrorClass.PROFILER_ERROR
    assert err.value.message == report.ncu_problem
    assert report.ncu_problem in report.backend("ncu").reason
    assert not report.backend("ncu").available
    # The pipeline's preflight refuses an ncu job here too, before anything starts.
    request = ProfileRequest(
        reference="ref.py:slow", candidates=["cand.py:fast"], inputs="ref.py:make_inputs"
    )
    assert request.backend == "ncu"
    with pytest.raises(NsightCoreError) as refused:
        preflight(request, EngineConfig.from_env())
    assert refused.value.error_class is ErrorClass.PROFILER_ERROR


def test_a_typo_in_nspy_ncu_never_falls_back_to_the_ncu_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = _two_ncus_on_path(tmp_path, monkeypatch)
    monkeypatch.setenv(NCU_ENV, "ncu-typo")
    found = discover_ncu(EngineConfig.from_env())
    assert found.used is None
    assert found.problem is not None and "'ncu-typo'" in found.problem
    assert NCU_ENV in found.hint
    # The ncu on PATH is still listed, so the report can show what is there.
    assert [(c.path, c.source) for c in found.candidates] == [
        (str(first), "PATH"),
        (str(second), "PATH"),
    ]
    report = probe.probe_environment(EngineConfig.from_env(), refresh=True)
    assert [n.path for n in report.ncu] == [str(first), str(second)]
    assert not any(n.used for n in report.ncu)
    assert f"ncu       none used: {found.problem}" in format_environment(report)


def test_nspy_ncu_comes_first_and_the_same_file_on_path_is_listed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = _two_ncus_on_path(tmp_path, monkeypatch)
    monkeypatch.setenv(NCU_ENV, str(second))
    found = discover_ncu(EngineConfig.from_env())
    assert found.used == str(second)
    assert [(c.path, c.source) for c in found.candidates] == [
        (str(second), "NSPY_NCU"),
        (str(first), "PATH"),
    ]


def test_discovery_reads_the_environment_it_is_given(tmp_path: Path) -> None:
    chosen = _exe(tmp_path / "bin" / "ncu")
    assert discover_ncu(EngineConfig.from_env({"PATH": str(chosen.parent)})).used == str(chosen)
    typo = discover_ncu(EngineConfig.from_env({"PATH": str(chosen.parent), NCU_ENV: "ncu-typo"}))
    assert typo.used is None and typo.candidates


def test_version_of_a_program_that_prints_none_or_cannot_start_is_none_with_a_reason(
    tmp_path: Path,
) -> None:
    silent = _exe(tmp_path / "ncu")
    assert query_ncu_version(str(silent)) == (None, "`ncu --version` gave no version (exit 1)")
    version, why = query_ncu_version(str(tmp_path / "no-ncu"))
    assert version is None and why is not None and "could not start" in why
    assert ncu_version(str(tmp_path / "no-ncu")) is None


def test_version_and_chip_list_are_parsed() -> None:
    text = (
        "NVIDIA (R) Nsight Compute Command Line Profiler\n"
        "Copyright (c) 2018-2025 NVIDIA Corporation\n"
        "Version 2025.3.1.0 (build 36398880) (public-release)\n"
    )
    assert parse_ncu_version(text) == "2025.3.1.0"
    assert parse_ncu_version("no version here") is None
    assert parse_list_chips("ga100, gh100\ntu102 ad102") == ["ad102", "ga100", "gh100", "tu102"]


@pytest.mark.parametrize(
    ("name", "cc", "chip"),
    [
        ("NVIDIA H200", "9.0", "gh100"),
        ("NVIDIA H100 80GB HBM3", "9.0", "gh100"),
        ("NVIDIA GH200 480GB", "9.0", "gh100"),
        ("NVIDIA A100-SXM4-80GB", "8.0", "ga100"),
        ("NVIDIA GeForce RTX 4090", "8.9", "ad102"),
        ("NVIDIA L4", "8.9", "ad104"),
        ("Tesla T4", "7.5", "tu104"),
        ("NVIDIA B200", "10.0", "gb100"),
        ("Some Future Hopper", "9.0", "gh100"),
        ("Unknown", "1.0", None),
    ],
)
def test_chip_is_inferred_from_product_name_then_compute_capability(
    name: str, cc: str, chip: str | None
) -> None:
    assert chip_for_gpu(name, cc) == chip


def test_record_catalogs_runs_on_a_bare_host_with_only_the_stdlib(tmp_path: Path) -> None:
    """The tool loads sandbox and ncu_install without pydantic or anyio, and reports a
    missing ncu through them."""
    code = (
        "import runpy, sys\n"
        "for m in ('pydantic', 'anyio', 'platformdirs'):\n"
        "    sys.modules[m] = None  # importing it now raises ImportError\n"
        f"tool = runpy.run_path({str(TOOL)!r}, run_name='record_catalogs')\n"
        f"rc = tool['main']([{str(tmp_path / 'out')!r}, '--ncu', {str(tmp_path / 'no-ncu')!r}])\n"
        "print('rc', rc)\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('nsight_core'))))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    rc_line, modules = proc.stdout.strip().splitlines()[-2:]
    assert rc_line == "rc 2", proc.stderr
    assert modules.split() == [
        "nsight_core",
        "nsight_core.errors",
        "nsight_core.exceptions",  # stdlib-only: NCUNotAvailableError, which discovery raises
        "nsight_core.host",
        "nsight_core.host.catalog_format",  # stdlib-only; catalog itself fails on pydantic
        "nsight_core.host.ncu_install",
        "nsight_core.plan",
        "nsight_core.plan.config",  # stdlib-only: the memory limit's variable name
        "nsight_core.processes",
        "nsight_core.processes.sandbox",
        "nsight_core.processes.sandbox.env",
        "nsight_core.processes.sandbox.landlock",
        "nsight_core.processes.sandbox.limits",
        "nsight_core.processes.sandbox.mechanisms",
        "nsight_core.processes.sandbox.memory",
        "nsight_core.processes.sandbox.outcome",
        "nsight_core.processes.sandbox.output",
        "nsight_core.processes.sandbox.run",
        "nsight_core.processes.sandbox.this_process",
        "nsight_core.processes.sandbox.tree",
        "nsight_core.runtime",
        "nsight_core.runtime.files",
    ]  # the packages' __init__ are docstrings only, but sandbox's, which re-exports its modules
    assert "could not start" in proc.stderr and "raw outputs only" in proc.stderr
