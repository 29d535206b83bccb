"""A candidate that hangs or kills its process costs only itself, and the answer says so.

Issue 41 measured a hang beside a correct candidate: the job ran to its 600 s limit, the
headline said "crashed its process", and the correct candidate was dropped untimed. Here the
hang's own call limit (judge/call_limit.py) ends it, the other candidates run again without
it (pipeline.py), and the headline names the candidate, its class and the limit.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from nsight_core.errors import ErrorClass
from nsight_core.judge.call_limit import CALL_FLOOR_S, CallLimit
from nsight_core.pipeline import run_profile_job
from nsight_core.plan.config import EngineConfig
from nsight_core.processes.sandbox import Deadline
from nsight_core.request import ProfileRequest
from tests.core.test_standby import SOURCE as STANDBY_SOURCE

SOURCE = (
    STANDBY_SOURCE
    + """
import signal
import time

def hangs(xs):
    time.sleep(3600)
    return xs

def dies(xs):
    os.kill(os.getpid(), signal.SIGKILL)

def hoards(xs):
    kept = []
    while True:
        kept.append(bytearray(64 << 20))
        time.sleep(0.01)
"""
)


def request(candidates: list[str], time_limit_s: float) -> ProfileRequest:
    return ProfileRequest.model_validate(
        {
            "reference": "ref",
            "candidates": candidates,
            "inputs": "make_inputs",
            "source": SOURCE,
            "reference_source": SOURCE,
            "configs": [{"n": 64}],
            "runs": 3,
            "backend": "events",
            "time_limit_s": time_limit_s,
        }
    )


@pytest.mark.slow
def test_a_hang_costs_only_its_own_candidate_and_the_headline_names_it(tmp_path: Path) -> None:
    t0 = time.monotonic()
    result = run_profile_job(request(["hangs", "good"], 32.0), tmp_path / "j", result_id="j")
    took = time.monotonic() - t0
    assert took < 32.0 + 10.0, took  # the job's limit, plus a start and an end
    assert result.status == "done", result.message
    timed = {r.Annotation for r in result.rows if r.AvgValue is not None}
    assert timed == {"ref", "good"}, result.message
    (hang,) = [f for f in result.failures if f.Annotation == "hangs"]
    assert hang.ErrorClass == ErrorClass.TIMEOUT
    assert "per-call limit" in hang.Error and hang.Hint
    assert "'hangs' ran out of time" in result.message and "per-call limit" in result.message
    assert "To fix:" in result.message
    assert result.error is None  # the job itself ended well: only the candidate failed


@pytest.mark.slow
def test_a_candidate_that_kills_its_process_is_named_in_the_headline(tmp_path: Path) -> None:
    result = run_profile_job(request(["dies"], 60.0), tmp_path / "j", result_id="j")
    assert result.status == "failed"
    (died,) = [f for f in result.failures if f.Annotation == "dies"]
    assert died.ErrorClass == ErrorClass.CRASHED
    assert "SIGKILL" in died.Error, died.Error
    assert "'dies'" in result.message and "crashed its process" in result.message


@pytest.mark.slow
def test_a_candidate_past_the_memory_limit_is_named_with_the_limit(tmp_path: Path) -> None:
    """The limit is on the job's processes together, so the judge is killed too: the call
    it had in flight (processes/in_flight.py) names the candidate."""
    config = EngineConfig(job_memory="1536MiB")
    result = run_profile_job(
        request(["hoards"], 60.0), tmp_path / "j", result_id="j", config=config
    )
    assert result.status == "failed"
    (hoarded,) = [f for f in result.failures if f.Annotation == "hoards"]
    assert hoarded.ErrorClass == ErrorClass.OUT_OF_MEMORY
    assert "1.5 GiB" in hoarded.Error and hoarded.Hint, hoarded
    assert "'hoards', ran out of memory" in result.message, result.message
    assert "to fix: use smaller inputs" in result.message


def test_a_call_limit_is_the_floor_then_the_reference_times_the_factor_then_half_the_time_left() -> (
    None
):
    limit = CallLimit(Deadline(3600.0))
    seconds, why = limit.for_candidate()
    assert seconds == CALL_FLOOR_S and "floor" in why
    limit.note_reference(2.0)
    seconds, why = limit.for_candidate()
    assert seconds == 100.0 and "reference's slowest call" in why
    short = CallLimit(Deadline(20.0))
    seconds, why = short.for_candidate()
    assert 9.0 < seconds <= 10.0 and "the job had left" in why
