"""Each backend's two sides of a measurement: the contestant's timer and the judge's samples."""

from __future__ import annotations

import time

import pytest

from nsight_core.collectors import backend_names, get_backend
from nsight_core.collectors.events import Device
from nsight_core.collectors.timers import TIMER_KINDS, call_timer, on_path, tampering_affects
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


FLUSH = "nsight_core.collectors.events._FLUSH_BUFFERS (['torch-cuda'] resized: (1,) -> (2,))"


@pytest.mark.parametrize(
    ("what", "events", "cupti", "ncu"),
    [
        # A patched host clock or CUDA event: only the events timer reads them.
        ("time.perf_counter_ns", "timer", "none", "none"),
        ("torch.cuda.Event.elapsed_time (seen after 'c')", "timer", "none", "none"),
        # The L2 flush and the device: both in-process timers flush; ncu flushes itself.
        (FLUSH, "timer", "timer", "none"),
        (
            "nsight_core.collectors.events.Device().kind ('torch-cuda' -> 'cpu')",
            "timer",
            "timer",
            "none",
        ),
        ("nsight_core.collectors.cupti.CuptiTimer()._cupti (replaced)", "none", "timer", "none"),
        ("cupti.cupti.get_timestamp", "none", "timer", "none"),
        # The ranges ncu reads.
        ("nvtx.end_range", "none", "none", "timer"),
        ("nsight_core.collectors.timers.start_range", "none", "none", "timer"),
        (
            "nsight_core.collectors.timers.RangeTimer().time_call (set on the instance)",
            "none",
            "none",
            "timer",
        ),
        # The harness's loop and its timer object: every timer's.
        ("nsight_core.contestant.core.Contestant().timer (replaced)", "timer", "timer", "timer"),
        # A reply nobody asked for carries in-process numbers only.
        ("nsight_core.protocol", "timer", "timer", "none"),
        # What candidates and the reference compute with: every row, whatever the timer.
        ("torch.softmax", "all", "all", "all"),
        ("nspy_user_ref.torch", "all", "all", "all"),
    ],
)
def test_each_backend_says_which_tampering_touches_its_timer(
    what: str, events: str, cupti: str, ncu: str
) -> None:
    got = {n: tampering_affects(get_backend(n), what) for n in ("events", "cupti", "ncu")}
    assert got == {"events": events, "cupti": cupti, "ncu": ncu}


def test_a_name_matches_a_path_only_at_a_boundary() -> None:
    assert on_path("time.perf_counter_ns", ("time",))
    assert not on_path("timeit.default_timer", ("time",))
    assert on_path(
        "nsight_core.collectors.events.Device().kind (x)", ("nsight_core.collectors.events.Device",)
    )
