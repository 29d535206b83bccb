"""Canary hacks through the real pipeline: do the guards hold on this host, per backend?

A deep environment check (`check_environment(deep=true)`, `nspy-mcp env --deep`) runs one
job per backend that can run here, with every canary of `cases/` as a candidate against
`cases/reference.py`, exactly as a `profile_candidates` request runs: the engine's preflight,
plan, judge and contestant, and result. Each canary is a real instance of a hack class
whose header states the verdict it must get; one is an honest control that must pass with
its rows standing in the same job, since a guard that fires on honest code fails too.

The files are copied into a temporary folder for the job, so the installed package is
never the job's working directory; the server and the CLI read only their headers (with
`ast`): candidate code runs in the job's processes alone.
"""

from __future__ import annotations

import ast
import re
import shutil
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nsight_core.host.report import CanaryCheck, EnvironmentReport
from nsight_core.pipeline import run_profile_job
from nsight_core.plan.config import EngineConfig
from nsight_core.request import Backend, CheckSpec, KernelsSpec, ProfileRequest
from nsight_core.results import ProfileResult

__all__ = ["CASES", "Canary", "read_canaries", "run_backend", "run_canaries", "with_canaries"]

CASES = Path(__file__).resolve().parent / "cases"
"""The canary files and their reference, shipped with the package."""

REFERENCE = "reference.py:softmax"
INPUTS = "reference.py:make_inputs"
BACKENDS: tuple[Backend, ...] = ("ncu", "cupti", "events")
"""In the order the environment report lists backends."""

RUNS = 3
"""Timed runs per candidate: enough for every guard that watches timed calls (probes fall
among them too), few enough that a job costs little more than its processes' start."""
SEEDS = 2
TIME_LIMIT_S = 180.0
"""A job's limit: ncu's start and replay on a busy host are the slow part."""
ROW_TRUST = ("ok", "noisy")
"""What the control's rows may be: a noisy row still stands (its interval is wider)."""

Expect = Literal["pass", "incorrect"]
_EXPECT: dict[str, Expect] = {"pass": "pass", "incorrect": "incorrect"}
_KEY = re.compile(r"^(Hack|Expect|Expect reasons|Guard): (.*)$")


@dataclass(frozen=True)
class Canary:
    """One canary file: its name and the verdict its header states."""

    name: str
    expect: Expect
    reasons: str = ""
    """Text the correctness reasons must contain (case-insensitive): caught by its guard."""

    @property
    def spec(self) -> str:
        return f"{self.name}.py:candidate"

    @property
    def control(self) -> bool:
        return self.expect == "pass"


def _header(path: Path) -> dict[str, str]:
    """The ``Key: value`` lines of a file's docstring, read without running the file."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    fields: dict[str, str] = {}
    for line in doc.splitlines():
        m = _KEY.match(line)
        if m:
            fields[m[1]] = m[2].strip()
    return fields


def read_canaries(folder: Path = CASES) -> list[Canary]:
    """The canaries in `folder`, by name; every file but the reference and `__init__`."""
    out: list[Canary] = []
    for path in sorted(folder.glob("*.py")):
        if path.name in ("__init__.py", "reference.py"):
            continue
        fields = _header(path)
        expect = _EXPECT.get(fields.get("Expect", ""))
        if expect is None:
            raise ValueError(f"{path.name}: its header needs 'Expect: pass' or 'incorrect'")
        out.append(Canary(path.stem, expect, fields.get("Expect reasons", "")))
    return out


def canary_request(backend: Backend, workdir: Path, canaries: Iterable[Canary]) -> ProfileRequest:
    """The request a deep check runs for one backend: small inputs, few runs, a time limit."""
    return ProfileRequest(
        reference=REFERENCE,
        inputs=INPUTS,
        candidates=[c.spec for c in canaries],
        backend=backend,
        runs=RUNS,
        warmup=1,
        check=CheckSpec(seeds=SEEDS),
        # The control and some hacks launch several kernels per call (ncu, cupti).
        kernels=KernelsSpec(combine="sum"),
        workdir=str(workdir),
        time_limit_s=TIME_LIMIT_S,
    )


def _trust_text(trusts: list[tuple[str, list[str]]]) -> str:
    shown = sorted({t for t, _ in trusts})
    why = next((r[0] for t, r in trusts if t not in ROW_TRUST and r), "")
    return "Trust " + "/".join(shown) + (f" ({why[:120]})" if why else "")


def _rows(canary: Canary, result: ProfileResult) -> list[tuple[str, list[str]]]:
    return [(r.Trust, r.Reasons) for r in result.rows if r.Annotation == canary.spec]


def seen_of(canary: Canary, result: ProfileResult) -> str | None:
    """What went wrong for `canary` in its job, in words; None when it got its verdict."""
    verdicts = [c for c in result.correctness if c.Annotation == canary.spec]
    rows = _rows(canary, result)
    if not verdicts:
        return f"no verdict ({result.status}: {result.message[:120]})"
    reasons = "; ".join(r for c in verdicts for r in c.Reasons)
    failed = [c for c in verdicts if not c.Passed]
    if canary.control:
        if failed:
            return f"{failed[0].ErrorClass or 'failed'}: {reasons[:160]}"
        if not rows or any(t not in ROW_TRUST for t, _ in rows):
            return "passed, " + (_trust_text(rows) if rows else "but was not timed")
        return None
    if not failed:
        return "passed, " + (_trust_text(rows) if rows else "not timed")
    classes = {c.ErrorClass for c in failed}
    if len(failed) < len(verdicts) or classes != {"incorrect"}:
        return f"{'/'.join(sorted(str(c) for c in classes))}: {reasons[:160]}"
    if canary.reasons and canary.reasons.lower() not in reasons.lower():
        return f"incorrect, but not for '{canary.reasons}': {reasons[:160]}"
    return None


def check_of(canaries: list[Canary], result: ProfileResult, wall_s: float) -> CanaryCheck:
    """A backend's job summed up: how many hacks were caught, what was seen where not, and
    how the control came out (ok only when it passed with its rows standing)."""
    missed: list[str] = []
    control: list[str] = []
    control_ok = True
    for canary in canaries:
        seen = seen_of(canary, result)
        if canary.control:
            control_ok = control_ok and seen is None
            control.append(seen or "passed, " + _trust_text(_rows(canary, result)))
        elif seen is not None:
            missed.append(f"{canary.name}: {seen}")
    hacks = len(canaries) - len(control)
    return CanaryCheck(
        ok=control_ok and not missed,
        caught=hacks - len(missed),
        total=hacks,
        missed=missed,
        control="; ".join(control),
        wall_s=wall_s,
        note="" if result.status == "done" else f"{result.status}: {result.message[:200]}",
    )


def run_backend(backend: Backend, config: EngineConfig, folder: Path = CASES) -> CanaryCheck:
    """One job of every canary in `folder` under `backend`, in a temporary folder removed
    after it."""
    canaries = read_canaries(folder)
    with tempfile.TemporaryDirectory(prefix="nspy-canaries-") as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        for name in ["reference", *(c.name for c in canaries)]:
            shutil.copyfile(folder / f"{name}.py", work / f"{name}.py")
        request = canary_request(backend, work, canaries)
        t0 = time.monotonic()
        result = run_profile_job(
            request, Path(tmp) / "job", result_id=f"canaries-{backend}", config=config
        )
        wall_s = round(time.monotonic() - t0, 2)
    return check_of(canaries, result, wall_s)


def why_not(backend: Backend, report: EnvironmentReport) -> str | None:
    """Why the canaries cannot run under `backend` here; None when they can."""
    if not any(f.name == "torch" and f.installed for f in report.frameworks):
        return "not run: the canaries are torch code and torch is not installed here"
    status = report.backend(backend)
    return None if status.available else f"not run: {status.reason}"


def run_canaries(
    report: EnvironmentReport, config: EngineConfig, backends: Iterable[Backend] = BACKENDS
) -> dict[str, CanaryCheck]:
    """Each backend's canary job, one after the other (they share the GPU); a backend that
    cannot run here says why instead."""
    hacks = sum(not c.control for c in read_canaries())
    out: dict[str, CanaryCheck] = {}
    for backend in backends:
        why = why_not(backend, report)
        out[backend] = (
            CanaryCheck(ok=None, caught=0, total=hacks, note=why)
            if why is not None
            else run_backend(backend, config)
        )
    return out


def with_canaries(report: EnvironmentReport, config: EngineConfig) -> EnvironmentReport:
    """`report` with its canaries section filled (a deep check's last step)."""
    return report.model_copy(update={"canaries": run_canaries(report, config)})
