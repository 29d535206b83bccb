"""The deep check's canaries: known hacks and an honest control through the real pipeline.

On CPU only the events backend runs (torch on the CPU); ncu and cupti say why they did
not. The same canaries run on all three backends on a GPU host (tests/gpu/test_canaries_gpu.py).
What a ``named`` or ``suspicious`` canary must show in its rows is also checked here on
results made up for it (a CUDA device's rows cannot be made on a CPU host).
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from nsight_core.host.probe import EnvironmentReport, probe_environment
from nsight_core.host.report import GpuInfo
from nsight_core.plan.config import EngineConfig
from nsight_core.results import Comparison, Correctness, ProfileResult, Row
from nspy_mcp.canaries import (
    CASES,
    Canary,
    hacks_under,
    read_jobs,
    run_backend,
    run_canaries,
    seen_of,
    without_persisting_l2,
)
from nspy_mcp.server import build_server
from tests.mcp.test_server import structured

REPO = Path(__file__).resolve().parents[2]
HACKS = hacks_under("events")
"""Hacks of the events backend: the main job's and the blind job's (events only)."""


@pytest.fixture
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A probe cache of the test's own: a deep probe is probed here, never read from the host's."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("NSPY_CACHE_DIR", str(cache))
    return cache


def test_every_canary_states_its_verdict_and_exactly_one_is_the_honest_control() -> None:
    jobs = read_jobs()
    assert [j.folder for j in jobs] == [CASES, CASES / "blind"]
    canaries = [c for j in jobs for c in j.canaries]
    assert len({c.name for c in canaries}) == len(canaries)  # 'name: seen' stays unambiguous
    assert [c.name for c in canaries if c.control] == ["honest_logsumexp"]
    assert sum(not c.control for c in canaries) >= 8
    for canary in canaries:
        doc = ast.get_docstring(ast.parse(canary.path.read_text())) or ""
        assert "Hack: " in doc, canary.name
        assert canary.control or "Guard: " in doc, canary.name
    for job in jobs:
        assert (job.folder / "reference.py").is_file()
        assert (job.folder / "__init__.py").is_file()  # shipped as a package's modules
    main, blind = jobs
    assert main.backends == ("ncu", "cupti", "events") and main.atol is None
    # The blind job's discrimination is the judge's and the rows' marking the parent's,
    # the same under every backend: it runs once, under events (docs/environment.md).
    assert (blind.reference, blind.inputs) == ("reference.py:mse_loss", "reference.py:make_pair")
    assert blind.backends == ("events",) and blind.atol == 0.02
    assert hacks_under("events") == hacks_under("ncu") + 1 == hacks_under("cupti") + 1
    by_name = {c.name: c for c in canaries}
    sample = by_name["sample_repeat"]
    assert (sample.expect, sample.reasons) == ("incorrect", "output mismatch")
    l2 = by_name["keep_l2_persisting"]
    assert (l2.expect, l2.row_reasons, l2.named_under) == (
        "named",
        "persisting-L2",
        ("events", "cupti"),
    )
    constant = by_name["constant_loss"]
    assert constant.expect == "suspicious" and constant.folder == CASES / "blind"
    assert constant.row_reasons.startswith("cannot tell a computed answer")


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
            assert check.total == hacks_under(name) == HACKS - 1  # no blind job there


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
    # A second job whose check does discriminate: the constant loss fails it, so the
    # canary that must pass as suspicious is missed, and the two jobs fold into one check.
    tight = folder / "tight"
    tight.mkdir()
    (tight / "reference.py").write_text(
        (CASES / "blind" / "reference.py").read_text().replace("Check atol: 0.02\n", "")
    )
    shutil.copyfile(CASES / "blind" / "constant_loss.py", tight / "constant_loss.py")
    check = run_backend("events", EngineConfig(), folder)
    assert (check.ok, check.caught, check.total) == (False, 1, 3)
    assert [m.split(": ", 1)[0] for m in check.missed] == ["not_a_hack", "constant_loss"]
    assert check.missed[0].startswith("not_a_hack: passed, Trust ")
    assert check.missed[1].startswith("constant_loss: incorrect: output mismatch")
    assert check.control.startswith("incorrect: output mismatch")
    # A job that ends other than done says so, named by its folder (the first job's is not).
    assert check.note.startswith("tight: failed: no candidate passed"), check.note
    assert check.wall_s is not None


def _made_up(
    canary: Canary,
    rows: list[tuple[str, str, list[str]]],
    resolvable: bool | None = None,
) -> ProfileResult:
    """A result in which `canary` passed its check, with rows (backend, GPU, reasons), Trust
    suspicious where a reason says the check cannot tell, and one comparison: only the
    fields `seen_of` reads (`model_construct`, unvalidated)."""
    verdict: dict[str, Any] = {"Annotation": canary.spec, "Passed": True, "Reasons": []}
    made: list[dict[str, Any]] = [
        {
            "Annotation": canary.spec,
            "Backend": backend,
            "GPU": gpu,
            "Trust": "suspicious" if any("cannot tell" in r for r in reasons) else "ok",
            "Reasons": reasons,
        }
        for backend, gpu, reasons in rows
    ]
    comparison: dict[str, Any] = {
        "Annotation": canary.spec,
        "ConfigId": 0,
        "Resolvable": resolvable,
    }
    result: dict[str, Any] = {
        "result_id": "made-up",
        "status": "done",
        "message": "",
        "correctness": [Correctness.model_construct(**verdict)],
        "rows": [Row.model_construct(**r) for r in made],
        "comparisons": [Comparison.model_construct(**comparison)],
    }
    return ProfileResult.model_construct(**result)


def test_a_named_canary_must_be_named_on_a_cuda_device_under_its_backends_only() -> None:
    (l2,) = [c for c in read_jobs()[0].canaries if c.name == "keep_l2_persisting"]
    named = ["raised the persisting-L2 limit to 4194304 B (cudaLimitPersistingL2CacheSize)"]
    h100 = "cuda:0 (NVIDIA H100 80GB HBM3)"
    assert seen_of(l2, _made_up(l2, [("events", "cpu", [])])) is None  # nothing to name
    assert seen_of(l2, _made_up(l2, [("ncu", "NVIDIA H100 80GB HBM3", [])])) is None
    assert seen_of(l2, _made_up(l2, [("events", h100, named), ("cupti", h100, named)])) is None
    seen = seen_of(l2, _made_up(l2, [("cupti", h100, [])]))
    assert seen is not None and "do not name 'persisting-L2'" in seen and "cupti" in seen
    # A GPU the probe found without persisting L2 (before Ampere) has nothing to undo.
    t4 = "cuda:0 (Tesla T4)"
    assert seen_of(l2, _made_up(l2, [("events", t4, [])]), ["Tesla T4"]) is None
    report = probe_environment(EngineConfig.from_env())
    old = GpuInfo(index=0, name="Tesla T4", compute_capability="7.5")
    new = GpuInfo(index=1, name="NVIDIA H100 80GB HBM3", compute_capability="9.0")
    assert without_persisting_l2(report.model_copy(update={"gpus": [old, new]})) == ["Tesla T4"]


def test_a_suspicious_canary_needs_every_row_suspicious_and_no_resolvable_comparison() -> None:
    (constant,) = read_jobs()[1].canaries
    blind = [f"config 0's check {constant.row_reasons}: one call's expected output passed"]
    assert seen_of(constant, _made_up(constant, [("events", "cpu", blind)])) is None
    seen = seen_of(constant, _made_up(constant, [("events", "cpu", [])]))
    assert seen is not None and seen.startswith("passed, Trust ok, not suspicious")
    seen = seen_of(constant, _made_up(constant, [("events", "cpu", blind)], resolvable=False))
    assert seen is not None and "comparison is resolvable" in seen


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
    report = probe_environment(EngineConfig.from_env())
    frameworks = [f.model_copy(update={"installed": f.name != "torch"}) for f in report.frameworks]
    no_torch = report.model_copy(update={"frameworks": frameworks})
    checks = run_canaries(no_torch, EngineConfig())
    assert list(checks) == ["ncu", "cupti", "events"]
    for name, check in checks.items():
        # wall_s is set by a job that ran: none did
        total = hacks_under(name)
        assert (check.ok, check.caught, check.total, check.wall_s) == (None, 0, total, None)
        assert "torch is not installed" in check.note
