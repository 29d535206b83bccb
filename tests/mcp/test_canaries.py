"""The deep check's canaries: known hacks and an honest control through the real pipeline.

On CPU only the events backend runs (torch on the CPU); ncu and cupti say why they did
not. The same canaries run on all three backends on a GPU host (tests/gpu/test_canaries_gpu.py).
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest
from mcp import Client

from nsight_core.host.probe import EnvironmentReport, probe_environment
from nsight_core.plan.config import EngineConfig
from nspy_mcp.canaries import CASES, read_canaries, run_backend, run_canaries
from nspy_mcp.server import build_server
from tests.mcp.test_server import structured

REPO = Path(__file__).resolve().parents[2]
HACKS = sum(not c.control for c in read_canaries())


@pytest.fixture
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A probe cache of the test's own: a deep probe is probed here, never read from the host's."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("NSPY_CACHE_DIR", str(cache))
    return cache


def test_every_canary_states_its_verdict_and_exactly_one_is_the_honest_control() -> None:
    canaries = read_canaries()
    assert [c.name for c in canaries if c.control] == ["honest_logsumexp"]
    assert HACKS >= 4
    for canary in canaries:
        doc = ast.get_docstring(ast.parse((CASES / f"{canary.name}.py").read_text())) or ""
        assert "Hack: " in doc, canary.name
        assert canary.control or "Guard: " in doc, canary.name
    assert (CASES / "reference.py").is_file()


@pytest.mark.anyio
async def test_deep_check_environment_catches_every_canary_on_cpu_and_the_control_passes(
    tmp_path: Path, private_cache: Path
) -> None:
    async with Client(build_server(tmp_path / "store")) as client:
        with anyio.fail_after(240):
            shallow = structured(await client.call_tool("check_environment", {}))
            deep = structured(await client.call_tool("check_environment", {"deep": True}))
    assert shallow.get("canaries") is None  # deep=false runs no job
    report = EnvironmentReport.model_validate(deep)
    assert report.canaries is not None
    assert set(report.canaries) == {"ncu", "cupti", "events"}
    events = report.canaries["events"]
    assert (events.ok, events.caught, events.total, events.missed) == (True, HACKS, HACKS, [])
    assert events.control.startswith("passed, Trust ")
    assert events.note == "" and events.wall_s is not None and events.wall_s > 0
    for name in ("ncu", "cupti"):
        check = report.canaries[name]
        if not report.backend(name).available:  # this host: say why, as the backend does
            assert check.ok is None and check.wall_s is None
            assert check.note == f"not run: {report.backend(name).reason}"


def test_a_hack_that_gets_through_and_a_control_that_fails_are_named_with_what_was_seen(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "cases"
    folder.mkdir()
    shutil.copyfile(CASES / "reference.py", folder / "reference.py")
    shutil.copyfile(CASES / "scribble_input.py", folder / "scribble_input.py")
    (folder / "not_a_hack.py").write_text(
        textwrap.dedent('''\
            """Claims to be a hack, but is an honest softmax: the guards must let it pass.

            Hack: none, whatever this header says.
            Expect: incorrect
            """

            import torch


            def candidate(x: torch.Tensor) -> torch.Tensor:
                return torch.softmax(x, dim=-1)
            ''')
    )
    (folder / "broken_control.py").write_text(
        textwrap.dedent('''\
            """A control that is wrong: the check must fail it, and the summary must say so.

            Hack: none.
            Expect: pass
            """

            import torch


            def candidate(x: torch.Tensor) -> torch.Tensor:
                return torch.zeros_like(x)
            ''')
    )
    check = run_backend("events", EngineConfig(), folder)
    assert (check.ok, check.caught, check.total) == (False, 1, 2)
    assert [m.split(": ", 1)[0] for m in check.missed] == ["not_a_hack"]
    assert check.missed[0].startswith("not_a_hack: passed, Trust ")
    assert check.control.startswith("incorrect: output mismatch")


def test_env_deep_json_from_outside_the_repository_reports_the_canaries(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = dict(os.environ, NSPY_CACHE_DIR=str(tmp_path / "cache"), TMPDIR=str(tmp_path))
    env.pop("PYTHONPATH", None)
    p = subprocess.run(
        [sys.executable, "-m", "nspy_mcp", "env", "--deep", "--json"],
        cwd=outside, capture_output=True, text=True, timeout=240, env=env, check=False,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert not outside.is_relative_to(REPO)
    report = EnvironmentReport.model_validate_json(p.stdout)
    assert report.deep and report.canaries is not None
    events = report.canaries["events"]
    assert (events.ok, events.caught, events.total) == (True, HACKS, HACKS), events.missed
    text = subprocess.run(
        [sys.executable, "-m", "nspy_mcp", "env", "--deep"],
        cwd=outside, capture_output=True, text=True, timeout=240, env=env, check=False,
    )  # fmt: skip
    line = next(x for x in text.stdout.splitlines() if x.startswith("canaries  events "))
    assert f" {HACKS}/{HACKS} hacks caught, control passed, Trust " in line
    assert line.endswith(" s)") and ": guards hold (" in line


def test_without_torch_every_backend_says_why_and_no_job_runs(
    tmp_path: Path, private_cache: Path
) -> None:
    report = probe_environment()
    frameworks = [f.model_copy(update={"installed": f.name != "torch"}) for f in report.frameworks]
    no_torch = report.model_copy(update={"frameworks": frameworks})
    checks = run_canaries(no_torch, EngineConfig())
    assert list(checks) == ["ncu", "cupti", "events"]
    for check in checks.values():
        # wall_s is set by a job that ran: none did
        assert (check.ok, check.caught, check.total, check.wall_s) == (None, 0, HACKS, None)
        assert "torch is not installed" in check.note
