"""The hack catalogue: every file here is a candidate whose header states the verdict it must get.

All candidates go through the real pipeline in one job (events backend, CPU torch), against
`_reference.softmax` (a candidate that runs alone may name another reference), the way
an agent's request would. Headers are read with `ast`, so no
candidate code runs in the test process. A header has ``Key: value`` lines (an indented
line continues the one above):

- ``Expect: incorrect`` (check fails with ErrorClass incorrect, never timed), ``pass``, or
  ``incorrect or pass`` (the hack may not fire; whichever verdict, it is a consistent one);
- ``Expect reasons:`` text that must appear in the correctness Reasons;
- ``Expect trust:`` allowed Trust values of the timed rows (for ``pass``);
  ``Expect trust ncu:`` (``events``, ``cupti``) instead under that backend: a rebinding
  off a backend's timing path leaves its rows standing (`Header.trust`);
- ``Expect reference trust:`` allowed Trust values of the reference's rows in its job
  (``ok, noisy`` unless set: a finding seen once candidates exist leaves them standing);
- ``Expect min time ns:`` a floor every timed run must reach (proves no cached fast path ran);
- ``Expect resolvable: no``: none of its comparisons may be `Resolvable` (where the check
  cannot tell its answer from one that ignores the inputs);
- ``Expect reference kernels:`` text every kernel name of the reference's rows contains, in
  its job (where rows name kernels: ncu and cupti);
- ``Runs alone:`` why the candidate gets a job of its own (the others share one job);
- ``Spec:`` the callable when it is not ``<file>.py:candidate`` (a file in a subfolder);
- ``Check atol:`` and ``Config:`` (``rows=8, cols=4096, scale=0.5``) for a job of its own
  with that tolerance and config; ``Reference:`` and ``Inputs:`` (callables of
  `_reference.py`) for one against another reference than the softmax.

`run_catalogue` is shared with tests/gpu, which runs the same files on CUDA tensors. Its
jobs go through one standby pool, as a server's do: after the first, each job is handed to
a judge and contestant started before it (standby.py), so every verdict here holds for
pre-started processes too.

On CPU each job runs when a test first needs it. The shared jobs (the candidates that need
no job of their own, as few jobs as the request's candidate limit allows) run by default; the
candidates that run alone are marked `slow` (a job each, about 3 s apiece on 2 cores) and
go through one standby pool, the first cold and the others pre-started, as above.
"""

from __future__ import annotations

import ast
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nsight_core.collectors.events_samples import EVENTS_KERNEL
from nsight_core.pipeline import run_profile_job
from nsight_core.plan.config import EngineConfig
from nsight_core.request import CheckSpec, KernelsSpec, ProfileRequest
from nsight_core.results import ProfileResult
from nsight_core.standby.pool import StandbyPool

HERE = Path(__file__).resolve().parent
REFERENCE = "_reference.py:softmax"
INPUTS = "_reference.py:make_inputs"
_KEY = re.compile(
    r"^(Hack|Expect|Expect reasons|Expect trust|Expect trust (?:ncu|events|cupti)"
    r"|Expect min time ns|Expect reference kernels|Expect reference trust|Expect resolvable"
    r"|Runs alone|Defence|Spec"
    r"|Check atol|Config|Reference|Inputs): (.*)$"
)


@dataclass(frozen=True)
class Header:
    name: str
    fields: dict[str, str]

    @property
    def spec(self) -> str:
        return self.fields.get("Spec", f"{self.name}.py:candidate")

    @property
    def config(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rows": 32, "cols": 64}
        for part in self.fields.get("Config", "").split(","):
            if "=" in part:
                key, value = (p.strip() for p in part.split("=", 1))
                out[key] = float(value) if "." in value else int(value)
        return out

    @property
    def reference(self) -> str:
        return self.fields.get("Reference", REFERENCE)

    @property
    def inputs(self) -> str:
        return self.fields.get("Inputs", INPUTS)

    @property
    def atol(self) -> float | None:
        value = self.fields.get("Check atol")
        return float(value) if value is not None else None

    @property
    def expect(self) -> str:
        return self.fields["Expect"]

    def trust(self, backend: str) -> list[str]:
        """The Trust values its timed rows may have under ``backend``."""
        text = self.fields.get(f"Expect trust {backend}", self.fields.get("Expect trust"))
        return [t.strip() for t in (text or "ok, noisy").split(",")]


def read_header(path: Path) -> Header:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    fields: dict[str, str] = {}
    key = None
    for line in doc.splitlines():
        m = _KEY.match(line)
        if m:
            key = m[1]
            fields[key] = m[2].strip()
        elif key is not None and line.startswith("  "):
            fields[key] += " " + line.strip()
        else:
            key = None
    return Header(path.stem, fields)


HEADERS = [
    read_header(p)
    for p in sorted(HERE.glob("*.py"))
    if not p.name.startswith(("_", "test_", "conftest"))
]


def test_every_catalogue_file_has_a_complete_header() -> None:
    assert HEADERS
    for h in HEADERS:
        assert {"Hack", "Expect", "Defence"} <= set(h.fields), h.name
        assert h.expect in ("incorrect", "pass", "incorrect or pass"), h.name
    assert any(h.name.startswith("legit_") for h in HEADERS)
    assert all(h.expect == "pass" for h in HEADERS if h.name.startswith("legit_"))


def profile(
    candidates: list[str],
    job_dir: Path,
    *,
    backend: str = "events",
    config: dict[str, Any] | None = None,
    atol: float | None = None,
    standby: StandbyPool | None = None,
    reference: str = REFERENCE,
    inputs: str = INPUTS,
) -> ProfileResult:
    request = ProfileRequest(
        reference=reference,
        inputs=inputs,
        candidates=candidates,
        configs=[config or {"rows": 32, "cols": 64}],
        backend=backend,
        runs=3,
        warmup=1,
        check=CheckSpec(seeds=2, atol=atol, rtol=None if atol is None else 1e-5),
        # Multi-kernel candidates (a GPU softmax in several ops) need their kernels summed.
        kernels=KernelsSpec(combine="sum"),
        workdir=str(HERE),
        time_limit_s=300,
    )
    t0 = time.monotonic()
    result = run_profile_job(request, job_dir, result_id=job_dir.name, standby=standby)
    # Streamed as each job ends, so a GPU run that is cut short still says where it was.
    sys.stdout.write(
        f"[{backend} {job_dir.name}] {time.monotonic() - t0:.1f} s {result.status}: "
        f"{result.message[:160]}\n"
    )
    sys.stdout.flush()
    return result


def run_catalogue(
    tmp: Callable[[str], Path], *, backend: str = "events", device: str = "cpu"
) -> dict[str, ProfileResult]:
    """Candidate spec -> the result of the job it ran in (the shared jobs, and the loners)."""
    extra = {} if device == "cpu" else {"device": device}
    pool = StandbyPool(config=EngineConfig.from_env())
    out: dict[str, ProfileResult] = {}
    try:
        for i, part in enumerate(SHARED_JOBS):
            result = profile(
                [h.spec for h in part],
                tmp(f"shared{i}"),
                backend=backend,
                config={"rows": 32, "cols": 64, **extra},
                standby=pool,
            )
            out |= dict.fromkeys([h.spec for h in part], result)
        for h in HEADERS:
            if "Runs alone" in h.fields:
                out[h.spec] = profile(
                    [h.spec],
                    tmp(h.name),
                    backend=backend,
                    config={**h.config, **extra},
                    atol=h.atol,
                    standby=pool,
                    reference=h.reference,
                    inputs=h.inputs,
                )
    finally:
        pool.close()
    jobs = len(SHARED_JOBS) + sum("Runs alone" in h.fields for h in HEADERS)
    sys.stdout.write(f"[{backend}] {pool.taken} of {jobs} jobs went to pre-started judges\n")
    assert pool.taken > 0, "no job of the catalogue went to a pre-started judge"
    return out


SHARED = [h for h in HEADERS if "Runs alone" not in h.fields]
LONERS = [h for h in HEADERS if "Runs alone" in h.fields]
MAX_CANDIDATES = next(
    m.max_length
    for m in ProfileRequest.model_fields["candidates"].metadata
    if getattr(m, "max_length", None)
)
_PER_JOB = (len(SHARED) + MAX_CANDIDATES - 1) // MAX_CANDIDATES
SHARED_JOBS = [SHARED[i::_PER_JOB] for i in range(_PER_JOB)]
"""The candidates that share a job, in as few jobs as a request's candidate limit allows."""

JobOf = Callable[[Header], ProfileResult]


def _param(h: Header) -> Any:
    return pytest.param(h, id=h.name, marks=[pytest.mark.slow] if h in LONERS else [])


@pytest.fixture(scope="module")
def loner_pool() -> Iterator[StandbyPool]:
    pool = StandbyPool(config=EngineConfig.from_env())
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def job_of(tmp_path_factory: pytest.TempPathFactory, loner_pool: StandbyPool) -> JobOf:
    """The result of the job a candidate ran in, run the first time a test asks for it: the
    shared job (cold) for the shared candidates, a job of its own (through `loner_pool`)
    for one that runs alone."""
    done: dict[str, ProfileResult] = {}

    def job(h: Header) -> ProfileResult:
        part = next((i for i, job in enumerate(SHARED_JOBS) if h in job), None)
        key = h.name if part is None else f"shared{part}"
        if key not in done:
            if part is not None:
                specs = [s.spec for s in SHARED_JOBS[part]]
                done[key] = profile(specs, tmp_path_factory.mktemp(key))
            else:
                done[key] = profile(
                    [h.spec],
                    tmp_path_factory.mktemp(h.name),
                    config=h.config,
                    atol=h.atol,
                    standby=loner_pool,
                    reference=h.reference,
                    inputs=h.inputs,
                )
        return done[key]

    return job


@pytest.mark.parametrize("header", [_param(h) for h in HEADERS])
def test_candidate_gets_the_verdict_its_header_states(header: Header, job_of: JobOf) -> None:
    result = job_of(header)
    verdicts = [c for c in result.correctness if c.Annotation == header.spec]
    rows = [r for r in result.rows if r.Annotation == header.spec]
    assert verdicts, f"no correctness verdict for {header.spec}: {result.message}"
    reasons = " | ".join(reason for c in verdicts for reason in c.Reasons)
    expect = header.expect
    if expect == "incorrect or pass":
        expect = "pass" if all(c.Passed for c in verdicts) else "incorrect"
    if expect == "incorrect":
        assert [(c.Passed, c.ErrorClass) for c in verdicts] == [(False, "incorrect")] * len(
            verdicts
        ), reasons
        # A candidate that fails the check is never timed.
        assert all(r.NumRuns == 0 and r.Trust == "failed" for r in rows)
    else:
        assert all(c.Passed for c in verdicts), reasons
        allowed = header.trust("events")
        assert rows
        assert all(r.Trust in allowed for r in rows), [(r.Trust, r.Reasons) for r in rows]
        floor = header.fields.get("Expect min time ns")
        if floor is not None:
            assert all(r.MinValue is not None and r.MinValue >= float(floor) for r in rows)
        if header.fields.get("Expect resolvable") == "no":
            mine = [c for c in result.comparisons if c.Annotation == header.spec]
            assert mine and all(c.Resolvable is not True for c in mine), mine
    expected_reason = header.fields.get("Expect reasons")
    if expected_reason is not None:
        assert expected_reason.lower() in reasons.lower(), reasons
    own = header.fields.get("Expect reference kernels")
    if own is not None:
        ref_rows = [r for r in result.rows if r.Annotation == header.reference]
        assert ref_rows and all(r.Trust in ("ok", "noisy") for r in ref_rows)
        named = [k for r in ref_rows for k in r.Kernels if k != EVENTS_KERNEL]  # events: no names
        foreign = {k for k in named if own.lower() not in k.lower()}
        assert not foreign, f"kernels of another thread in the reference's rows: {foreign}"


@pytest.mark.parametrize(
    "header",
    [
        # each shared job, by one of its candidates
        *(pytest.param(job[0], id=f"shared{i}") for i, job in enumerate(SHARED_JOBS)),
        *(_param(h) for h in LONERS),
    ],
)
def test_the_reference_is_timed_and_trusted_in_every_job(header: Header, job_of: JobOf) -> None:
    # Every call of the reference is made before any candidate is imported, so what a
    # candidate rebinds (a timer, a buffer) or forges leaves its rows standing; a finding
    # that concerns the whole job (a shadowing file) says so in its header.
    res = job_of(header)
    rows = [r for r in res.rows if r.Annotation == header.reference]
    allowed = [
        t.strip() for t in header.fields.get("Expect reference trust", "ok, noisy").split(",")
    ]
    assert rows, res.message
    assert all(r.Trust in allowed for r in rows), [(r.Trust, r.Reasons) for r in rows]


@pytest.mark.slow
def test_the_jobs_that_run_alone_went_to_pre_started_judges(
    job_of: JobOf, loner_pool: StandbyPool
) -> None:
    for h in LONERS:  # already run when the tests above ran: their results are kept
        job_of(h)
    taken = f"{loner_pool.taken} of {len(LONERS)}"
    sys.stdout.write(f"[events] {taken} jobs of candidates that run alone were pre-started\n")
    assert loner_pool.taken > 0, "no job of the catalogue went to a pre-started judge"
