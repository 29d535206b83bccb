"""The judge and the contestant on CPU: what runs inside a timed call, and what is reported."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from nsight_core.collectors import get_backend
from nsight_core.collectors.base import Backend, HostFacts, Records, Wrapped, register
from nsight_core.errors import NsightCoreError
from nsight_core.host.report import BackendStatus
from nsight_core.judge.core import Judge
from nsight_core.judge.entry import check_path_once
from nsight_core.pipeline import run_profile_job
from nsight_core.plan.config import EngineConfig
from nsight_core.plan.job_plan import jit_cache_env
from nsight_core.processes.launch import LAUNCH_FILE, LaunchPlan
from nsight_core.processes.sandbox import landlock_abi
from nsight_core.processes.seat import Seat
from nsight_core.protocol import JobSpec, LaunchSpec, SampleEvent
from nsight_core.request import ProfileRequest
from nsight_core.results import ProfileResult
from nsight_core.rows.runs import read_events
from nsight_core.runtime.callable_spec import resolve_spec
from nsight_core.settings import JobSettings

SOURCE = """
import sys

def make_inputs(path):
    return (path,)

def ref(path):
    with open(path, "a") as fh:
        fh.write(f"{'nvtx' in sys.modules}\\n")
    return 1

def same(path):
    return ref(path)
"""


def test_events_timed_calls_open_no_nvtx_range_so_none_pays_for_its_import(
    tmp_path: Path,
) -> None:
    unconfined = dataclasses.replace(
        EngineConfig.from_env(), confine="off"
    )  # the candidate writes its log outside workdir
    log = tmp_path / "seen.txt"
    request = ProfileRequest(
        reference="ref",
        candidates=["same"],
        inputs="make_inputs",
        source=SOURCE,
        reference_source=SOURCE,
        configs=[{"path": str(log)}],
        runs=3,
        backend="events",
        check={"check_determinism": False},
    )
    result = run_profile_job(request, tmp_path / "job", result_id="t", config=unconfined)
    assert result.status == "done", result.message
    lines = log.read_text().split()
    assert lines and set(lines) == {"False"}
    assert all(r.NumRuns == 3 for r in result.rows)


class RangeOnly(Backend):
    """The 'range' child timer without a profiler: the loop ncu measures, run on CPU."""

    name = "test-range"
    evidence = "external"
    child_timer = "range"
    default_metric = "gpu__time_duration.sum"
    any_metric = True
    settings_apply = False

    def wrap(
        self, argv: Sequence[str], launch: LaunchSpec, out_dir: Path, config: EngineConfig
    ) -> Wrapped:
        return Wrapped(list(argv))

    def read_records(
        self, wrapped: Wrapped, samples: Sequence[SampleEvent], settings: JobSettings
    ) -> Records:
        return Records([], list(settings.metrics))

    def availability(self, host: HostFacts, fixes: list[str]) -> BackendStatus:
        return BackendStatus(name=self.name, available=True, reason="a test's backend")


@pytest.mark.usefixtures("own_tempdir")
def test_range_timer_loop_reports_one_range_per_call_and_only_checked_candidates(
    tmp_path: Path,
) -> None:
    # The judge runs in this process with a backend that opens NVTX ranges but attaches no
    # profiler (so the ranges are no-ops): every timed call still reports its RunKey, and
    # a wrong candidate is never reported as timed. (Outside the sandbox, which gives a
    # judge's process a temporary directory it removes, the seat's slots go to the test's.)
    register(RangeOnly())
    source = SOURCE + "\ndef wrong(path):\n    return 2\n"
    request = ProfileRequest(
        reference="ref",
        candidates=["same", "wrong"],
        inputs="make_inputs",
        source=source,
        reference_source=source,
        configs=[{"path": str(tmp_path / "seen.txt")}],
        runs=3,
        backend="events",
        check={"check_determinism": False},
    )
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "src.py").write_text(source)
    job = JobSpec(
        mode="request",
        backend="test-range",
        request=request,
        workdir=str(tmp_path),
        source_file=str(job_dir / "src.py"),
        callables={s: resolve_spec(s, tmp_path) for s in [request.inputs, *request.annotations]},
        launch=LaunchSpec(backend="test-range", metrics=list(request.metrics)),
        settings=dataclasses.replace(JobSettings.of_request(request), backend="test-range").wire(),
    )
    assert job.launch is not None
    assert (
        Judge(job, request, job_dir, Seat(job.launch, job_dir, EngineConfig.from_env())).run() == 0
    )
    events = read_events(job_dir / "events.jsonl")
    keys = sorted((r.annotation, r.run) for r in events.ranges)
    assert keys == [(a, r) for a in ("ref", "same") for r in range(3)]
    assert all(r.ok for r in events.ranges) and not events.samples
    assert [c.annotation for c in events.checks if not c.passed] == ["wrong"]
    assert events.end is not None and events.end.error_class is None
    # The range loop imported nvtx before any call; the events loop above never did.
    assert "True" in (tmp_path / "seen.txt").read_text().split()


CRASH_AT_IMPORT = """
import os

def make_inputs(n):
    return (list(range(n)),)

def ref(xs):
    return sum(xs)
"""


def job_with_candidate(tmp_path: Path, name: str, code: str, *, n: int) -> ProfileResult:
    """An events job: the reference of CRASH_AT_IMPORT against ``name:cand`` holding ``code``."""
    (tmp_path / "job_code.py").write_text(CRASH_AT_IMPORT)
    (tmp_path / name).write_text(code)
    request = ProfileRequest(
        reference="job_code.py:ref",
        candidates=[f"{name}:cand"],
        inputs="job_code.py:make_inputs",
        configs=[{"n": n}],
        workdir=str(tmp_path),
        backend="events",
        runs=3,
    )
    return run_profile_job(request, tmp_path / "job", result_id="t")


def test_a_candidate_that_kills_the_contestant_at_import_leaves_the_reference_timed(
    tmp_path: Path,
) -> None:
    """The reference runs before any candidate is imported (issue 10), so a candidate whose
    import ends the process cannot take the reference's rows with it, nor be blamed on them."""
    killer = "import os\nos._exit(3)\n\ndef cand(xs):\n    return sum(xs)\n"
    result = job_with_candidate(tmp_path, "killer.py", killer, n=64)
    ref_rows = [r for r in result.rows if r.Annotation == "job_code.py:ref"]
    assert ref_rows and all(r.NumRuns == 3 and r.ErrorClass is None for r in ref_rows)
    assert result.status == "failed" and result.message.startswith("no candidate passed")
    crashed = [f for f in result.failures if f.ErrorClass == "crashed"]
    assert crashed and all(f.Annotation != "job_code.py:ref" for f in crashed)


PLANTER = """
from pathlib import Path

def cand(xs):
    # What an agent's candidate would do to win a later job: plant a compiled kernel under
    # the reference's cache key in the judge's JIT cache.
    try:
        (Path(JUDGE_CACHE) / "planted").write_text("x")
    except OSError:
        pass
    return sum(xs)
"""


@pytest.mark.skipif(landlock_abi() < 1, reason="kernel without Landlock")
def test_the_judge_compiles_into_caches_no_contestant_can_write(tmp_path: Path) -> None:
    """A compiled kernel planted in the judge's JIT cache would change expected outputs of
    later jobs; the contestant gets a cache of its own and cannot write the judge's."""
    judge_cache = Path(jit_cache_env(EngineConfig())["TRITON_CACHE_DIR"])
    (judge_cache / "planted").unlink(missing_ok=True)
    planter = f"JUDGE_CACHE = {str(judge_cache)!r}\n" + PLANTER
    result = job_with_candidate(tmp_path, "planter.py", planter, n=8)
    assert result.provenance is not None and result.provenance.contestant_confined
    assert [(c.Annotation, c.Passed) for c in result.correctness] == [("planter.py:cand", True)]
    assert not (judge_cache / "planted").exists()


def test_the_checking_path_a_pre_started_judge_warms_up_passes_on_identical_outputs() -> None:
    """What `warm_checks` runs on CUDA while a standby waits, here on the CPU: it must be the
    judge's real path and pass (a broken warm-up would only show as a slower first job)."""
    tally = check_path_once("cpu")
    assert tally.calls == 3 and tally.passed, tally.reasons


@pytest.mark.usefixtures("own_tempdir")
def test_a_cold_job_starts_its_contestant_from_the_servers_plan_before_the_judge_imports(
    tmp_path: Path,
) -> None:
    """A cold job takes the one way a job reaches a judge: the server writes the contestant's
    command into the judge's home (launch.json) and hands the job to the judge it spawned at
    once; the judge's handover thread, listening before the judge imports anything heavy,
    starts the contestant with the standard library alone (judge/handover.py)."""
    result = job_with_candidate(tmp_path, "same.py", "def cand(xs):\n    return sum(xs)\n", n=8)
    assert result.status == "done", result.message
    assert result.provenance is not None
    phases = result.provenance.phase_seconds
    assert "spawn" in phases and "standby_idle" not in phases  # cold: start-up counts
    # The job came while the judge still started: how much of its start was left then.
    assert phases["judge.start_left"] > 0.0 and phases["judge.idle"] == 0.0, phases
    assert 0.0 <= phases["launch"] < 5.0 and phases["judge.waited"] >= 0.0, phases
    # Whichever process started later, the other waited for it; they cannot both wait long.
    assert min(phases["judge.waited"], phases["contestant.waited_for_job"]) < 0.5, phases
    assert "nsight_core.contestant" in " ".join(result.provenance.command)
    heavy = ["pydantic", "numpy", "torch", "nsight_core.protocol", "nsight_core.judge.core"]
    probe = f"import sys, nsight_core.judge.boot; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run(
        [sys.executable, "-P", "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"  # nothing heavy before the contestant is spawned
    left = [p.name for p in Path(tempfile.gettempdir()).glob("nspy-*")]
    assert left == []  # the judge's home and the contestant's private directory are removed


@pytest.mark.parametrize("module", ["nsight_core.contestant.core", "nsight_core.judge.entry"])
def test_a_jobs_processes_import_no_backend_they_do_not_run(module: str) -> None:
    """A contestant or judge imports its timer's backend, not ncu's with the metric catalog
    and the environment probe (0.36 s -> 0.25 s of the contestant's import on CPU); a
    backend is imported when `get_backend` is first asked for it, and then works."""
    server_side = [
        "nsight_core.collectors.ncu",
        "nsight_core.host.catalog",
        "nsight_core.host.probe",
    ]
    probe = (
        f"import sys, {module}\n"
        f"print([m for m in {server_side!r} if m in sys.modules])\n"
        "from nsight_core.collectors import backend_names, get_backend\n"
        "print([get_backend(n).name for n in backend_names()])\n"
    )
    out = subprocess.run(
        [sys.executable, "-P", "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.split("\n")[:2] == ["[]", "['cupti', 'events', 'ncu']"]


def test_an_unknown_backend_is_refused_with_every_known_one_named() -> None:
    with pytest.raises(NsightCoreError, match="backend 'nsys' is not available") as err:
        get_backend("nsys")
    assert all(name in (err.value.hint or "") for name in ("cupti", "events", "ncu"))


def test_a_launch_plan_that_is_not_one_is_ignored(tmp_path: Path) -> None:
    assert LaunchPlan.read(tmp_path) is None
    (tmp_path / LAUNCH_FILE).write_text('{"argv": "python -c 1", "private": "p", "out_dir": "o"}')
    assert LaunchPlan.read(tmp_path) is None
    (tmp_path / LAUNCH_FILE).write_text("[1, 2]")
    assert LaunchPlan.read(tmp_path) is None


_EXIT_PROBE = """
import atexit, ctypes, sys
from nsight_core.runtime.process import exit_native
atexit.register(lambda: print("python-atexit", flush=True))
handler_type = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p)
def c_handler(status, arg):
    sys.stdout.write(f"c-exit-handler {status}\\n")
    sys.stdout.flush()
handler = handler_type(c_handler)
ctypes.CDLL(None).on_exit(handler, None)  # what ncu's injected library relies on
sys.stdout.write("buffered ")
exit_native(3, python_atexit=len(sys.argv) > 1)
"""


@pytest.mark.parametrize("python_atexit", [False, True])
def test_a_native_exit_runs_c_exit_handlers_and_flushes_but_skips_pythons_teardown(
    python_atexit: bool,
) -> None:
    """The `@kernel` mode ends through C's exit: exit handlers a profiler's injected
    library registered run (with the exit code), while Python's finalization is skipped; its
    buffered output still arrives, and so do Python's atexit callbacks when asked for."""
    out = subprocess.run(
        [sys.executable, "-P", "-c", _EXIT_PROBE, *(["atexit"] if python_atexit else [])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 3, out.stderr
    expected = ["buffered", *(["python-atexit"] if python_atexit else []), "c-exit-handler", "3"]
    assert out.stdout.split() == expected
