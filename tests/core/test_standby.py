"""Pre-started judges (standby.py) with real processes: a job handed over gets the same
verdicts and numbers as a cold one, other settings start cold, a dead standby is replaced.

Each test runs two or three jobs, about 3 s apiece on 2 cores: the handover itself and the
handover socket's refusal of strangers run by default, the other cases are `slow`."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsight_core.pipeline import run_profile_job
from nsight_core.plan.config import EngineConfig
from nsight_core.processes.sandbox import Deadline, SandboxLimits, run_sandboxed
from nsight_core.protocol import JUDGE_DIR, STANDBY_SOCKET, STDERR_FILE
from nsight_core.request import ProfileRequest
from nsight_core.results import ProfileResult
from nsight_core.standby.memory import StandbyMemory
from nsight_core.standby.policy import StandbyKey
from nsight_core.standby.pool import StandbyPool
from nsight_core.standby.prestarted import Standby

SOURCE = """
import os

def make_inputs(n):
    return ([float(i) for i in range(n)],)

def ref(xs):
    return [2.0 * x for x in xs]

def good(xs):
    return [x + x for x in xs]

def wrong(xs):
    return [0.0 for x in xs]

"""


def request(**kw: object) -> ProfileRequest:
    base: dict[str, object] = {
        "reference": "ref",
        "candidates": ["good", "wrong"],
        "inputs": "make_inputs",
        "source": SOURCE,
        "reference_source": SOURCE,
        "configs": [{"n": 64}],
        "runs": 3,
        "backend": "events",
    }
    return ProfileRequest.model_validate({**base, **kw})


def verdicts(result: ProfileResult) -> list[tuple[str, bool]]:
    return [(c.Annotation, c.Passed) for c in result.correctness]


def phases(result: ProfileResult) -> dict[str, float]:
    assert result.provenance is not None, result.message
    return result.provenance.phase_seconds


def intrude(judge: Standby, tmp_path: Path) -> None:
    """Another process finds ``judge``'s handover socket and names a job directory of its
    own: the socket closes unanswered (no ``ok``), the judge stays alive and runs nothing
    of that directory."""
    intruder = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.settimeout(5)\n"
        "s.connect(sys.argv[1])\n"
        "try:\n"
        "    s.sendall(sys.argv[2].encode() + b'\\n')\n"
        "    print(repr(s.recv(100)))\n"
        "except (BrokenPipeError, ConnectionResetError):  # closed on us, unanswered\n"
        "    print(repr(b''))\n"
    )
    forged = tmp_path / "forged"
    forged.mkdir()
    out = subprocess.run(
        [sys.executable, "-c", intruder, str(judge.home / STANDBY_SOCKET), str(forged)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.stdout.strip() == "b''", out  # closed unanswered, no "ok"
    assert judge.alive() and not (forged / "events.jsonl").exists()


@pytest.fixture
def pool() -> Iterator[StandbyPool]:
    p = StandbyPool(config=EngineConfig.from_env())
    yield p
    p.close()


def test_the_next_job_is_handed_to_a_pre_started_judge_and_judged_the_same(
    tmp_path: Path, pool: StandbyPool
) -> None:
    cold = run_profile_job(request(), tmp_path / "a", result_id="a", standby=pool)
    assert pool.taken == 0 and cold.status == "done", cold.message
    time.sleep(1.0)  # an agent reads its answer; the standby starts meanwhile
    spare = pool.spare
    assert spare is not None
    warm = run_profile_job(request(), tmp_path / "b", result_id="b", standby=pool)
    assert pool.taken == 1 and warm.status == "done", warm.message
    assert verdicts(warm) == verdicts(cold) == [("good", True), ("wrong", False)]
    took = phases(warm)
    assert took["spawn"] == 0.0 and took["standby_idle"] > 0.0, took
    assert "standby_idle" not in phases(cold)
    # A cold job's phases cover its contestant's launch (its spawn until its interpreter
    # ran: no wrapper here, so short); a pre-started one's launch was before its job.
    first = phases(cold)
    assert 0.0 <= first["launch"] < 2.0, first
    assert "launch" not in took, took
    # Its files are the job's, as a cold job's are. Each judge (cold ones take the same
    # path) released its job once its events were complete, so its own log arrives when
    # its process has ended: before the next job may start (settle), with nothing left of
    # the standby's home.
    assert pool.released == 2
    assert (tmp_path / "a" / JUDGE_DIR / STDERR_FILE).is_file()
    for name in ("events", "stdout", "stderr"):
        assert Path(warm.artifacts[name]).is_file(), (name, warm.artifacts)
        assert str(tmp_path / "b") in warm.artifacts[name]
    pool.settle()
    assert (tmp_path / "b" / JUDGE_DIR / STDERR_FILE).is_file()
    assert not spare.alive() and not spare.home.exists()
    rows = {r.Annotation: r for r in warm.rows}
    assert rows["good"].NumRuns == 3 and rows["ref"].NumRuns == 3 and "wrong" not in rows


@pytest.mark.slow
def test_a_job_whose_judge_ends_badly_is_not_released_and_fails_as_a_cold_one(
    tmp_path: Path, pool: StandbyPool
) -> None:
    """Only exit code 0 releases a job early; any other code waits for the judge's outcome,
    which says what happened, exactly as for a cold job."""
    broken = request(
        reference="broken",
        source=SOURCE,
        reference_source=SOURCE + "\ndef broken(xs):\n    raise ValueError('no')\n",
    )
    cold = run_profile_job(broken, tmp_path / "a", result_id="a", standby=pool)
    warm = run_profile_job(broken, tmp_path / "b", result_id="b", standby=pool)
    assert pool.taken == 1 and pool.released == 0
    assert cold.status == warm.status != "done", (cold.message, warm.message)
    assert cold.message == warm.message


@pytest.mark.slow
def test_a_job_with_other_settings_retires_the_standby_and_starts_cold(
    tmp_path: Path, pool: StandbyPool
) -> None:
    run_profile_job(request(), tmp_path / "a", result_id="a", standby=pool)
    other = run_profile_job(
        request(cache_control="none"), tmp_path / "b", result_id="b", standby=pool
    )
    assert pool.taken == 0 and other.status == "done", other.message
    assert "standby_idle" not in phases(other)
    # ... and the standby left for the next job is one for the settings just used.
    again = run_profile_job(
        request(cache_control="none"), tmp_path / "c", result_id="c", standby=pool
    )
    assert pool.taken == 1 and verdicts(again) == verdicts(other)


@pytest.mark.slow
def test_a_standby_that_died_while_idle_is_replaced_by_a_cold_start(
    tmp_path: Path, pool: StandbyPool
) -> None:
    run_profile_job(request(), tmp_path / "a", result_id="a", standby=pool)
    spare = pool.spare
    assert spare is not None
    spare.cancel.set()  # killed while it waited: its judge and contestant are gone
    while spare.alive():
        time.sleep(0.05)
    result = run_profile_job(request(), tmp_path / "b", result_id="b", standby=pool)
    assert pool.taken == 0 and result.status == "done", result.message
    assert verdicts(result) == [("good", True), ("wrong", False)]


@pytest.mark.slow
def test_a_job_handed_over_can_be_cancelled(tmp_path: Path, pool: StandbyPool) -> None:
    run_profile_job(request(), tmp_path / "a", result_id="a", standby=pool)
    slow = SOURCE + "\ndef slow(xs):\n    import time\n    time.sleep(60)\n    return xs\n"
    cancel = threading.Event()
    threading.Timer(3.0, cancel.set).start()
    t0 = time.monotonic()
    result = run_profile_job(
        request(source=slow, candidates=["slow"]),
        tmp_path / "b",
        result_id="b",
        standby=pool,
        cancel=cancel,
    )
    assert pool.taken == 1
    assert time.monotonic() - t0 < 30.0
    assert result.error is not None and result.error.ErrorClass == "cancelled", result.message


@pytest.mark.slow
def test_a_pool_closed_leaves_no_standby(tmp_path: Path) -> None:
    pool = StandbyPool(config=EngineConfig.from_env())
    run_profile_job(request(), tmp_path / "a", result_id="a", standby=pool)
    spare = pool.spare
    assert spare is not None and spare.alive()
    pool.close()
    assert not spare.alive() and not spare.home.exists()
    run_profile_job(request(), tmp_path / "b", result_id="b", standby=pool)
    assert pool.spare is None and pool.taken == 0


def test_a_deadline_re_armed_while_the_process_runs_replaces_the_first_limit(
    tmp_path: Path,
) -> None:
    sleeper = [sys.executable, "-c", "import time; time.sleep(30)"]
    deadline = Deadline(600.0)
    threading.Timer(0.3, deadline.arm, args=(0.5,)).start()
    t0 = time.monotonic()
    out = run_sandboxed(
        sleeper, cwd=tmp_path, limits=SandboxLimits(wall_s=600.0), deadline=deadline
    )
    assert out.timed_out and out.error_class == "timeout"
    assert "0.5 s limit" in out.message and time.monotonic() - t0 < 10.0
    # Re-armed later, a short first limit no longer applies.
    deadline = Deadline(0.5)
    threading.Timer(0.1, deadline.arm, args=(30.0,)).start()
    quick = [sys.executable, "-c", "import time; time.sleep(1.5)"]
    out = run_sandboxed(quick, cwd=tmp_path, limits=SandboxLimits(wall_s=0.5), deadline=deadline)
    assert not out.timed_out and out.error_class is None


def test_only_the_pool_that_started_a_judge_can_hand_it_a_job(
    tmp_path: Path, pool: StandbyPool
) -> None:
    """The handover socket's path is readable in /proc by any process: another process that
    connects and names a job directory (with code of its choosing for the unconfined judge
    to import as the reference) gets no answer, and the standby stays the pool's."""
    run_profile_job(request(), tmp_path / "a", result_id="a", standby=pool)
    pool.settle()
    spare = pool.spare
    assert spare is not None and spare.ready()
    intrude(spare, tmp_path)
    result = run_profile_job(request(), tmp_path / "b", result_id="b", standby=pool)
    assert pool.taken == 1 and verdicts(result) == [("good", True), ("wrong", False)]


@pytest.mark.slow
def test_a_pool_with_memory_writes_its_settings_and_a_later_pool_pre_starts_them(
    tmp_path: Path,
) -> None:
    """What a restarted server does (jobs.LocalExecutor.begin_prestart): the first pool's
    job leaves the settings in the store's file; a new pool started from that file hands
    its first job to the pre-started pair, judged the same as the cold one."""
    memory = StandbyMemory(tmp_path / "standby.json")
    first = StandbyPool(config=EngineConfig.from_env(), memory=memory, slot="cpu")
    try:
        cold = run_profile_job(request(), tmp_path / "a", result_id="a", standby=first)
        spare = first.spare
        assert spare is not None
    finally:
        first.close()
    specs = memory.recall("cpu")
    assert [s.model_dump_json() for s in specs] == [spare.key.spec]
    assert memory.recall("gpu-7") == []
    second = StandbyPool(
        config=EngineConfig.from_env(), memory=StandbyMemory(tmp_path / "standby.json"), slot="cpu"
    )
    try:
        env, memory_bytes = dict(spare.key.env), spare.key.memory_bytes
        second.prestart([StandbyKey.of(s, env, memory_bytes) for s in specs])
        started = second.spare
        assert started is not None and started.speculative
        deadline = time.monotonic() + 60
        while not started.ready() and time.monotonic() < deadline:
            time.sleep(0.05)  # the agent's first thought: the pair is up before the request
        warm = run_profile_job(request(), tmp_path / "b", result_id="b", standby=second)
    finally:
        second.close()
    assert second.taken == 1 and warm.status == "done", warm.message
    assert verdicts(warm) == verdicts(cold) == [("good", True), ("wrong", False)]
    assert phases(warm)["spawn"] == 0.0 and "standby_idle" in phases(warm)


@pytest.mark.slow
def test_a_job_retires_a_speculative_standby_still_starting_instead_of_waiting(
    tmp_path: Path,
) -> None:
    """A remembered setting's standby must not make a job slower than a cold start: one that
    still starts when a job arrives (whatever the job's settings) is retired at once; a
    ready one stays for the job."""
    pool = StandbyPool(
        config=EngineConfig.from_env(), memory=StandbyMemory(tmp_path / "standby.json"), slot="cpu"
    )
    try:
        run_profile_job(request(), tmp_path / "a", result_id="a", standby=pool)
        used = pool.spare
        assert used is not None
        pool.settle()
        old = used.key
        pool.close()
        pool = StandbyPool(
            config=EngineConfig.from_env(),
            memory=StandbyMemory(tmp_path / "standby.json"),
            slot="cpu",
        )
        pool.prestart([old])
        spare = pool.spare
        assert spare is not None and not spare.ready()
        t0 = time.monotonic()
        pool.settle()
        assert time.monotonic() - t0 < 5.0
        assert pool.spare is None and not spare.alive() and not spare.home.exists()
        # A standby started after a job (not speculative) is waited for, as before.
        pool.refill(old)
        again = pool.spare
        assert again is not None and not again.speculative
        pool.settle()
        assert pool.spare is again and again.ready()
    finally:
        pool.close()


def test_a_memory_file_that_is_not_ours_is_read_as_empty(tmp_path: Path) -> None:
    path = tmp_path / "standby.json"
    for text in ("not json", "[1, 2]", '{"slots": {"cpu": [{"backend": 3}]}}', '{"slots": 5}'):
        path.write_text(text)
        assert StandbyMemory(path).recall("cpu") == []
