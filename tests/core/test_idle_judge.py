"""The idle judge (judge/handover.py) with real processes: a job whose settings no
standby has goes to the judge the pool started before any request, whose contestant starts
the moment the job comes; it is judged as a cold job is, and only the pool can hand it one."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsight_core.pipeline import run_profile_job
from nsight_core.plan.config import EngineConfig
from nsight_core.plan.job_plan import job_env
from nsight_core.processes.sandbox import default_memory_limit
from nsight_core.standby.pool import StandbyPool
from nsight_core.standby.prestarted import Standby
from tests.core.test_standby import intrude, phases, request, verdicts


@pytest.fixture
def pool() -> Iterator[StandbyPool]:
    """A pool keeping an idle judge for the jobs' own environment (what a server does)."""
    config = EngineConfig.from_env()
    p = StandbyPool(config=EngineConfig.from_env())
    p.keep_idle(job_env(None, config), default_memory_limit(config.job_memory))
    yield p
    p.close()


def ready_idle(pool: StandbyPool) -> Standby:
    idle = pool.idle
    assert idle is not None and idle.idle
    deadline = time.monotonic() + 60
    while not idle.ready() and time.monotonic() < deadline:
        time.sleep(0.05)  # the agent's first thought: the judge is up before the request
    assert idle.ready()
    return idle


def test_a_job_with_new_settings_goes_to_the_idle_judge_and_is_judged_as_a_cold_one(
    tmp_path: Path, pool: StandbyPool
) -> None:
    used = ready_idle(pool)
    result = run_profile_job(request(), tmp_path / "a", result_id="a", standby=pool)
    assert result.status == "done", result.message
    assert pool.taken_idle == 1 and pool.taken == 0
    assert verdicts(result) == [("good", True), ("wrong", False)]
    rows = {r.Annotation: r for r in result.rows}
    assert rows["good"].NumRuns == 3 and rows["ref"].NumRuns == 3 and "wrong" not in rows
    took = phases(result)
    # Its start was done before the job; the contestant was spawned at the handover.
    assert took["judge.idle"] > 0.0 and took["judge.start_left"] == 0.0, took
    assert 0.0 < took["spawn"] < 0.5 and "launch" in took and "standby_idle" not in took, took
    pool.settle()
    assert not used.alive() and not used.home.exists()
    # Another idle judge is kept for the next new settings; these have a standby pair now.
    assert pool.idle is not None and pool.idle is not used and pool.spare is not None
    again = run_profile_job(request(), tmp_path / "b", result_id="b", standby=pool)
    assert pool.taken == 1 and pool.taken_idle == 1 and verdicts(again) == verdicts(result)


@pytest.mark.slow
def test_a_job_that_comes_while_the_idle_judge_starts_is_taken_by_it(
    tmp_path: Path, pool: StandbyPool
) -> None:
    """The first request right after a server's start: the idle judge takes it whatever it
    is doing, and its contestant starts at once rather than after the judge's imports."""
    result = run_profile_job(request(), tmp_path / "a", result_id="a", standby=pool)
    assert result.status == "done", result.message
    assert pool.taken_idle == 1 and verdicts(result) == [("good", True), ("wrong", False)]
    assert "judge.start_left" in phases(result) and "standby_idle" not in phases(result)


def test_only_the_pool_that_started_an_idle_judge_can_hand_it_a_job(
    tmp_path: Path, pool: StandbyPool
) -> None:
    """Another process that finds the socket and names a job directory gets no answer and
    starts nothing; the idle judge stays the pool's."""
    idle = ready_idle(pool)
    intrude(idle, tmp_path)
    result = run_profile_job(request(), tmp_path / "b", result_id="b", standby=pool)
    assert pool.taken_idle == 1 and verdicts(result) == [("good", True), ("wrong", False)]
