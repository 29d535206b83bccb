"""One profiler per GPU: the standby pool's rule, and what a job does when the profiler is
held by someone else.

Measured on an H100 (issue 41, tools/probe_profiler_sessions.py): a process that ncu profiles
holds the GPU's profiler for as long as it lives, so a second ncu process there fails ("a
driver resource was unavailable") or waits. CI has no ncu, so these tests record that rule
on the events backend (`holds_profiler` set, as ncu's is) and run real judges and contestants
through the pool: at no job's start and after no refill may two holders live.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nsight_core.collectors.events_samples import EventsBackend
from nsight_core.collectors.ncu import classify_ncu_failure, profiler_busy
from nsight_core.errors import ErrorClass
from nsight_core.host.profilers import profiler_users
from nsight_core.pipeline import FIRST_ATTEMPT_DIR, run_profile_job
from nsight_core.plan.config import EngineConfig
from nsight_core.protocol import LaunchSpec
from nsight_core.standby.policy import PoolPolicy, StandbyKey, holds_profiler
from nsight_core.standby.pool import StandbyPool
from tests.core.test_standby import request

# ncu 2025.3.1's log on an H100 (driver 580.159.04) when another process held the profiler.
BUSY_LOG = (
    "==PROF== Connected to process 1485\n"
    "==ERROR== An error was reported by the driver\n"
    "==ERROR== Profiling failed because a driver resource was unavailable. Ensure that no "
    "other tool (like DCGM) is concurrently collecting profiling data. See "
    "https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html#faq for more details.\n"
    '==ERROR== Failed to profile "nspy_prime" in process 1485\n'
)


@pytest.fixture
def events_hold_the_profiler(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(EventsBackend, "holds_profiler", True)
    holds_profiler.cache_clear()
    yield
    holds_profiler.cache_clear()


def holders_alive(pool: StandbyPool) -> list[StandbyKey]:
    with pool._lock:
        spares = dict(pool._spares)
    return [k for k, sb in spares.items() if sb.alive() and holds_profiler(k.spec)]


@pytest.mark.slow
def test_no_two_profiler_holders_live_on_one_gpu_across_a_session_of_setting_changes(
    tmp_path: Path, events_hold_the_profiler: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = StandbyPool(capacity=2, config=EngineConfig.from_env())
    seen: list[str] = []
    run = StandbyPool.run

    def watched_run(self: StandbyPool, key: StandbyKey, job_dir: Path, **kw: Any) -> Any:
        rivals = [k for k in holders_alive(self) if k != key]
        if rivals:
            seen.append(f"{job_dir.name}: {len(rivals)} other holder(s) alive at its start")
        return run(self, key, job_dir, **kw)

    monkeypatch.setattr(StandbyPool, "run", watched_run)
    settings = [{}, {"cache_control": "none"}, {}, {}, {"cache_control": "none"}]
    try:
        for i, kw in enumerate(settings):
            result = run_profile_job(
                request(**kw), tmp_path / f"j{i}", result_id=f"j{i}", standby=pool
            )
            assert result.status == "done", result.message
            time.sleep(0.5)  # the refilled standby starts while the agent reads
            alive = holders_alive(pool)
            assert len(alive) <= 1, (i, alive)
        # The same settings twice in a row were handed to the standby the first left.
        assert pool.taken >= 1
    finally:
        pool.close()
    assert not seen, seen


@pytest.mark.slow
def test_without_the_rule_both_settings_keep_a_standby(tmp_path: Path) -> None:
    """The control: events contestants hold nothing, so the pool keeps one per setting."""
    pool = StandbyPool(capacity=2, config=EngineConfig.from_env())
    try:
        for i, kw in enumerate([{}, {"cache_control": "none"}]):
            run_profile_job(request(**kw), tmp_path / f"j{i}", result_id=f"j{i}", standby=pool)
        pool.settle()
        with pool._lock:
            assert sum(sb.alive() for sb in pool._spares.values()) == 2
    finally:
        pool.close()


def test_a_job_whose_profiler_was_held_elsewhere_runs_once_more_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recognition is the backend's (ncu reads its log, below); here the first attempt
    is recognised as such, and the job runs again from its inputs alone."""
    asked: list[Path] = []

    def busy_once(self: EventsBackend, job_dir: Path) -> bool:
        asked.append(job_dir)
        return len(asked) == 1

    monkeypatch.setattr(EventsBackend, "profiler_was_busy", busy_once)
    pool = StandbyPool(config=EngineConfig.from_env())
    try:
        result = run_profile_job(request(), tmp_path / "job", result_id="job", standby=pool)
    finally:
        pool.close()
    assert result.status == "done", result.message
    assert len(asked) == 1  # once only: the second attempt is not retried again
    assert result.provenance is not None and result.provenance.waits["profiler_retry"] > 0
    first = tmp_path / "job" / FIRST_ATTEMPT_DIR
    assert (first / "events.jsonl").is_file()
    assert (tmp_path / "job" / "events.jsonl").is_file()


def test_ncu_finding_the_profiler_held_names_who_may_hold_it_and_what_to_do() -> None:
    assert profiler_busy(BUSY_LOG) and not profiler_busy("==ERROR== something else\n")
    err = classify_ncu_failure(1, BUSY_LOG, False, holders=["4242 ncu --metrics x python"])
    assert err is not None and err.error_class == ErrorClass.PROFILER_ERROR
    assert "held by another process" in err.message and "4242 ncu" in err.message
    assert "wait until" in err.hint
    nobody = classify_ncu_failure(1, BUSY_LOG, False)
    assert nobody is not None and "could be named" in nobody.message


def test_processes_a_profiler_was_injected_into_are_listed() -> None:
    env = {**os.environ, "CUDA_INJECTION64_PATH": "/opt/ncu/libInjection.so"}
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], env=env, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if any(u.startswith(f"{child.pid} ") for u in profiler_users()):
                break
            time.sleep(0.05)
        assert any(u.startswith(f"{child.pid} ") for u in profiler_users())
    finally:
        child.kill()
        child.wait()
    assert not any(u.startswith(f"{child.pid} ") for u in profiler_users())


def test_an_idle_judge_holds_no_profiler() -> None:
    assert not holds_profiler("")
    assert PoolPolicy().rivals(StandbyKey("", ()), StandbyKey("a", ())) is False


def test_a_new_standby_displaces_its_own_key_its_rivals_then_the_oldest(
    events_hold_the_profiler: None,
) -> None:
    def key(cache: str, backend: str = "events") -> StandbyKey:
        spec = LaunchSpec(backend=backend, metrics=["gpu__time_duration.sum"], cache_control=cache)
        return StandbyKey.of(spec, {})

    a, b, c = key("all"), key("none"), key("all", "cupti")
    policy = PoolPolicy(capacity=2)
    assert policy.displaced([a], b) == [a]  # both hold the profiler: one per GPU
    assert policy.displaced([c], a) == []  # cupti holds none: both may wait
    assert policy.displaced([a, c], a) == [a]  # its own key is started afresh
    assert policy.displaced([c, key("none", "cupti")], a) == [c]  # the oldest beyond capacity
