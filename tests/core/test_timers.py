"""Each backend's two sides of a measurement: the contestant's timer and the judge's samples."""

from __future__ import annotations

import time

import pytest

from nsight_core.collectors import backend_names, get_backend
from nsight_core.collectors.events import Device
from nsight_core.collectors.timers import TIMER_KINDS, call_timer
from nsight_core.protocol import RunKey
from nsight_core.request import ProfileRequest
from nsight_core.settings import JobSettings


def _settings(backend: str) -> JobSettings:
    request = ProfileRequest.model_validate(
        {"reference": "r", "candidates": ["c"], "inputs": "m", "source": "", "backend": backend}
    )
    return JobSettings.of_request(request)


@pytest.mark.parametrize("name", backend_names())
def test_every_backend_has_a_contestant_timer_of_its_kind(name: str) -> None:
    backend = get_backend(name)
    timer = call_timer(backend.child_timer)
    assert timer.kind == backend.child_timer in TIMER_KINDS
    # An external profiler measures exactly when the rows can claim external evidence.
    assert timer.external == (backend.evidence == "external")


def test_the_clock_times_the_call_and_the_judge_files_it_under_the_backends_metric() -> None:
    key = RunKey("ref", 0, 1)

    def call() -> int:
        time.sleep(0.002)
        return 7

    timed = call_timer("clock").time_call(Device("cpu"), key, call)
    assert timed.out == 7 and timed.ns is not None and timed.ns >= 2e6
    events = get_backend("events")
    samples = events.call_samples(key, timed.ns, timed.kernels, _settings("events"))
    assert [(s.metric, s.value, s.annotation, s.run) for s in samples] == [
        (events.default_metric, timed.ns, "ref", 1)
    ]


def test_under_a_profiler_the_call_is_a_range_and_the_judge_adds_no_sample() -> None:
    pytest.importorskip("nvtx")
    timer = call_timer("range")
    timer.start()
    timed = timer.time_call(Device("cpu"), RunKey("ref", 0, 0), lambda: 3)
    assert timed.out == 3 and timed.ns is None
    ncu = get_backend("ncu")
    assert ncu.call_samples(RunKey("ref", 0, 0), timed.ns, [], _settings("ncu")) == []
