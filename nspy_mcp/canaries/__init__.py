"""Canary hacks through the real pipeline: do the guards hold on this host, per backend?

A deep environment check (`check_environment(deep=true)`, `nspy-mcp env --deep`) runs, per
backend that can run here, the canary jobs that list it: every canary of a folder as a
candidate against that folder's `reference.py`, exactly as a `profile_candidates` request
runs: the engine's preflight, plan, judge and contestant, and result. `cases/` is the main
job (a small softmax, every backend); a subfolder with a `reference.py` of its own is
another job (`cases/blind/`: a loss whose check cannot discriminate). A folder's
`reference.py` header names its job: ``Reference:``, ``Inputs:``, ``Check atol:`` and
``Backends:`` (default: all). The jobs' outcomes fold into one `CanaryCheck` per backend.

Each canary is a real instance of a hack class whose header states the verdict it must get
(``Expect:``):

- ``incorrect``: fails its check, for ``Expect reasons:`` where given;
- ``suspicious``: passes, its rows are Trust suspicious with ``Expect row reasons:`` and
  none of its comparisons is resolvable (the check could not tell its answer);
- ``named``: passes with its rows standing, and on a CUDA device under a backend of
  ``Named under:`` every row's Reasons name it (``Expect row reasons:``); elsewhere it
  must just pass (a GPU known to lack what the harness undoes is left out too);
- ``pass``: the honest control, which must pass with its rows standing in the same job,
  since a guard that fires on honest code fails too.

The files are copied into a temporary folder for each job, so the installed package is
never a job's working directory; the server and the CLI read only their headers (with
`ast`): candidate code runs in the jobs' processes alone.
"""

from __future__ import annotations

import ast
import re
import shutil
import tempfile
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from nsight_core.collectors import BACKEND_ORDER
from nsight_core.host.report import CanaryCheck, EnvironmentReport
from nsight_core.pipeline import run_profile_job
from nsight_core.plan.config import EngineConfig
from nsight_core.request import Backend, CheckSpec, KernelsSpec, ProfileRequest
from nsight_core.results import ProfileResult, Row

__all__ = [
    "CASES",
    "Canary",
    "CanaryJob",
    "hacks_under",
    "read_canaries",
    "read_jobs",
    "run_backend",
    "run_canaries",
    "with_canaries",
]

CASES = Path(__file__).resolve().parent / "cases"
"""The canary files and their references, shipped with the package."""

REFERENCE = "reference.py:softmax"
INPUTS = "reference.py:make_inputs"
"""A folder's reference and input maker where its `reference.py` header names none."""
BACKENDS: tuple[Backend, ...] = BACKEND_ORDER
"""In the order the environment report lists backends (the registry's order)."""

RUNS = 3
"""Timed runs per candidate: enough for every guard that watches timed calls (probes fall
among them too), few enough that a job costs little more than its processes' start."""
SEEDS = 2
TIME_LIMIT_S = 180.0
"""A job's limit: ncu's start and replay on a busy host are the slow part."""
ROW_TRUST = ("ok", "noisy")
"""What the control's rows may be: a noisy row still stands (its interval is wider)."""
PERSISTING_L2_CC = 8.0
"""The compute capability from which CUDA has a persisting-L2 limit (Ampere): a GPU the
probe reports below it gets no ``named`` finding about it (there is nothing to undo)."""

Expect = Literal["pass", "incorrect", "suspicious", "named"]
_EXPECT: tuple[str, ...] = get_args(Expect)
_KEY = re.compile(
    r"^(Hack|Expect|Expect reasons|Expect row reasons|Named under|Guard"
    r"|Reference|Inputs|Check atol|Backends): (.*)$"
)


@dataclass(frozen=True)
class Canary:
    """One canary file: its name and the verdict its header states."""

    name: str
    expect: Expect
    reasons: str = ""
    """Text the correctness reasons must contain (case-insensitive): caught by its guard."""
    row_reasons: str = ""
    """Text its rows' Reasons must contain (``suspicious``, ``named`` where it applies)."""
    named_under: tuple[str, ...] = ()
    """``named``: the backends whose rows must name it (on a CUDA device)."""
    folder: Path = CASES

    @property
    def spec(self) -> str:
        return f"{self.name}.py:candidate"

    @property
    def path(self) -> Path:
        return self.folder / f"{self.name}.py"

    @property
    def control(self) -> bool:
        return self.expect == "pass"


@dataclass(frozen=True)
class CanaryJob:
    """One folder's job: its reference, how it is checked, where it runs, its canaries."""

    folder: Path
    reference: str = REFERENCE
    inputs: str = INPUTS
    atol: float | None = None
    backends: tuple[str, ...] = BACKENDS
    canaries: tuple[Canary, ...] = field(default=())

    @property
    def hacks(self) -> int:
        return sum(not c.control for c in self.canaries)


def _header(path: Path) -> dict[str, str]:
    """The ``Key: value`` lines of a file's docstring, read without running the file."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    fields: dict[str, str] = {}
    for line in doc.splitlines():
        m = _KEY.match(line)
        if m:
            fields[m[1]] = m[2].strip()
    return fields


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


def read_canaries(folder: Path = CASES) -> list[Canary]:
    """The canaries in `folder`, by name; every file but the reference and `__init__`."""
    out: list[Canary] = []
    for path in sorted(folder.glob("*.py")):
        if path.name in ("__init__.py", "reference.py"):
            continue
        fields = _header(path)
        expect = fields.get("Expect", "")
        if expect not in _EXPECT:
            raise ValueError(f"{path.name}: its header needs 'Expect: ' one of {_EXPECT}")
        named_under = _names(fields.get("Named under", ""))
        if expect == "named" and not (named_under and fields.get("Expect row reasons")):
            raise ValueError(f"{path.name}: 'named' needs 'Named under:' and 'Expect row reasons:'")
        if expect == "suspicious" and not fields.get("Expect row reasons"):
            raise ValueError(f"{path.name}: 'suspicious' needs 'Expect row reasons:'")
        out.append(
            Canary(
                path.stem,
                expect,  # type: ignore[arg-type]  # checked against Expect's values above
                fields.get("Expect reasons", ""),
                fields.get("Expect row reasons", ""),
                named_under,
                folder,
            )
        )
    return out


def read_job(folder: Path) -> CanaryJob:
    """The job of `folder`, as its `reference.py` header states it."""
    fields = _header(folder / "reference.py")
    backends = _names(fields.get("Backends", "")) or BACKENDS
    if unknown := set(backends) - set(BACKENDS):
        raise ValueError(f"{folder.name}/reference.py: unknown backends {sorted(unknown)}")
    atol = fields.get("Check atol")
    return CanaryJob(
        folder=folder,
        reference=fields.get("Reference", REFERENCE),
        inputs=fields.get("Inputs", INPUTS),
        atol=float(atol) if atol is not None else None,
        backends=tuple(b for b in BACKENDS if b in backends),
        canaries=tuple(read_canaries(folder)),
    )


def read_jobs(folder: Path = CASES) -> list[CanaryJob]:
    """`folder`'s job, then one per subfolder that has a `reference.py` of its own."""
    subs = sorted(d for d in folder.iterdir() if d.is_dir() and (d / "reference.py").is_file())
    return [read_job(folder), *(read_job(d) for d in subs)]


def hacks_under(backend: str, folder: Path = CASES) -> int:
    """How many hacks the deep check runs under `backend` (its CanaryCheck's `total`)."""
    return sum(job.hacks for job in read_jobs(folder) if backend in job.backends)


def canary_request(backend: Backend, workdir: Path, job: CanaryJob) -> ProfileRequest:
    """The request a deep check runs for one job and backend: small inputs, few runs, a
    time limit."""
    return ProfileRequest(
        reference=job.reference,
        inputs=job.inputs,
        candidates=[c.spec for c in job.canaries],
        backend=backend,
        runs=RUNS,
        warmup=1,
        check=CheckSpec(seeds=SEEDS, atol=job.atol),
        # The control and some hacks launch several kernels per call (ncu, cupti).
        kernels=KernelsSpec(combine="sum"),
        workdir=str(workdir),
        time_limit_s=TIME_LIMIT_S,
    )


def _trust_text(rows: list[Row]) -> str:
    shown = sorted({r.Trust for r in rows})
    why = next((r.Reasons[0] for r in rows if r.Trust not in ROW_TRUST and r.Reasons), "")
    return "Trust " + "/".join(shown) + (f" ({why[:120]})" if why else "")


def _rows(canary: Canary, result: ProfileResult) -> list[Row]:
    return [r for r in result.rows if r.Annotation == canary.spec]


def _says(reasons: Iterable[str], text: str) -> bool:
    return any(text.lower() in r.lower() for r in reasons)


def _named_on(canary: Canary, row: Row, unnamed_gpus: Collection[str]) -> bool:
    """Whether `row` must name `canary`: its backend is one the canary names, it ran on a
    CUDA device (the row's GPU; 'cpu' on the CPU), and not on a GPU without the feature."""
    gpu = row.GPU or ""
    if row.Backend not in canary.named_under or gpu in ("", "cpu"):
        return False
    return not any(name and name in gpu for name in unnamed_gpus)


def seen_of(
    canary: Canary, result: ProfileResult, unnamed_gpus: Collection[str] = ()
) -> str | None:
    """What went wrong for `canary` in its job, in words; None when it got its verdict.
    `unnamed_gpus`: GPU names on which a ``named`` canary is not named (no such feature)."""
    verdicts = [c for c in result.correctness if c.Annotation == canary.spec]
    rows = _rows(canary, result)
    if not verdicts:
        return f"no verdict ({result.status}: {result.message[:120]})"
    reasons = "; ".join(r for c in verdicts for r in c.Reasons)
    failed = [c for c in verdicts if not c.Passed]
    if canary.expect != "incorrect":  # it must pass its check: what then of its rows
        if failed:
            return f"{failed[0].ErrorClass or 'failed'}: {reasons[:160]}"
        if not rows:
            return "passed, but was not timed"
        if canary.expect == "suspicious":
            return _seen_suspicious(canary, result, rows)
        if any(r.Trust not in ROW_TRUST for r in rows):
            return "passed, " + _trust_text(rows)
        silent = [
            r
            for r in rows
            if canary.expect == "named"
            and _named_on(canary, r, unnamed_gpus)
            and not _says(r.Reasons, canary.row_reasons)
        ]
        if silent:
            return (
                f"passed, {_trust_text(rows)}, but {len(silent)} of {len(rows)} rows under "
                f"{silent[0].Backend} on {silent[0].GPU} do not name '{canary.row_reasons}'"
            )
        return None
    if not failed:
        return "passed, " + (_trust_text(rows) if rows else "not timed")
    classes = {c.ErrorClass for c in failed}
    if len(failed) < len(verdicts) or classes != {"incorrect"}:
        return f"{'/'.join(sorted(str(c) for c in classes))}: {reasons[:160]}"
    if canary.reasons and not _says([reasons], canary.reasons):
        return f"incorrect, but not for '{canary.reasons}': {reasons[:160]}"
    return None


def _seen_suspicious(canary: Canary, result: ProfileResult, rows: list[Row]) -> str | None:
    """A pass the check could not vouch for: every row suspicious for the stated reason,
    no comparison resolvable."""
    if any(r.Trust != "suspicious" or not _says(r.Reasons, canary.row_reasons) for r in rows):
        return f"passed, {_trust_text(rows)}, not suspicious for '{canary.row_reasons}'"
    comps = [c for c in result.comparisons if c.Annotation == canary.spec]
    resolved = [c for c in comps if c.Resolvable is not None]
    if resolved:
        c = resolved[0]
        return f"passed, Trust suspicious, but config {c.ConfigId}'s comparison is resolvable"
    return None


def check_of(
    canaries: Iterable[Canary],
    result: ProfileResult,
    wall_s: float,
    unnamed_gpus: Collection[str] = (),
) -> CanaryCheck:
    """A job summed up: how many hacks were caught, what was seen where not, and how the
    control came out (ok only when it passed with its rows standing)."""
    canaries = list(canaries)
    missed: list[str] = []
    control: list[str] = []
    control_ok = True
    for canary in canaries:
        seen = seen_of(canary, result, unnamed_gpus)
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


def fold(checks: list[tuple[str, CanaryCheck]]) -> CanaryCheck:
    """One backend's jobs as one check: the counts added, the misses and notes joined (a
    note of a job but the first named by its folder), the wall times added."""
    if len(checks) == 1:
        return checks[0][1]
    notes = [f"{name}: {c.note}" if i else c.note for i, (name, c) in enumerate(checks) if c.note]
    walls = [c.wall_s for _, c in checks if c.wall_s is not None]
    return CanaryCheck(
        ok=all(c.ok for _, c in checks),
        caught=sum(c.caught for _, c in checks),
        total=sum(c.total for _, c in checks),
        missed=[m for _, c in checks for m in c.missed],
        control="; ".join(c.control for _, c in checks if c.control),
        wall_s=round(sum(walls), 2) if walls else None,
        note="; ".join(notes),
    )


def run_job(
    backend: Backend, job: CanaryJob, config: EngineConfig, unnamed_gpus: Collection[str] = ()
) -> CanaryCheck:
    """One job of every canary of `job` under `backend`, in a temporary folder removed
    after it."""
    with tempfile.TemporaryDirectory(prefix="nspy-canaries-") as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        for name in ["reference", *(c.name for c in job.canaries)]:
            shutil.copyfile(job.folder / f"{name}.py", work / f"{name}.py")
        request = canary_request(backend, work, job)
        t0 = time.monotonic()
        result = run_profile_job(
            request,
            Path(tmp) / "job",
            result_id=f"canaries-{job.folder.name}-{backend}",
            config=config,
        )
        wall_s = round(time.monotonic() - t0, 2)
    return check_of(job.canaries, result, wall_s, unnamed_gpus)


def run_backend(
    backend: Backend,
    config: EngineConfig,
    folder: Path = CASES,
    unnamed_gpus: Collection[str] = (),
) -> CanaryCheck:
    """Every job of `folder` (`read_jobs`) that lists `backend`, one after the other, as
    one check."""
    jobs = [job for job in read_jobs(folder) if backend in job.backends]
    return fold([(job.folder.name, run_job(backend, job, config, unnamed_gpus)) for job in jobs])


def why_not(backend: Backend, report: EnvironmentReport) -> str | None:
    """Why the canaries cannot run under `backend` here; None when they can."""
    if not any(f.name == "torch" and f.installed for f in report.frameworks):
        return "not run: the canaries are torch code and torch is not installed here"
    status = report.backend(backend)
    return None if status.available else f"not run: {status.reason}"


def without_persisting_l2(report: EnvironmentReport) -> list[str]:
    """The names of the GPUs the probe found below compute capability 8.0: no persisting
    L2 there, so nothing for the harness to undo or name."""
    out = []
    for gpu in report.gpus:
        try:
            cc = float(gpu.compute_capability or "")
        except ValueError:
            continue
        if cc < PERSISTING_L2_CC:
            out.append(gpu.name)
    return out


def run_canaries(
    report: EnvironmentReport, config: EngineConfig, backends: Iterable[Backend] = BACKENDS
) -> dict[str, CanaryCheck]:
    """Each backend's canary jobs, one after the other (they share the GPU); a backend that
    cannot run here says why instead."""
    unnamed = without_persisting_l2(report)
    out: dict[str, CanaryCheck] = {}
    for backend in backends:
        why = why_not(backend, report)
        out[backend] = (
            CanaryCheck(ok=None, caught=0, total=hacks_under(backend), note=why)
            if why is not None
            else run_backend(backend, config, unnamed_gpus=unnamed)
        )
    return out


def with_canaries(report: EnvironmentReport, config: EngineConfig) -> EnvironmentReport:
    """`report` with its canaries section filled (a deep check's last step)."""
    return report.model_copy(update={"canaries": run_canaries(report, config)})
