"""A call's output is complete when its timed window closes (issue 26, class 3), and the
events backend's host-inclusive latency (issue 27): the rule, the host-clock timer's side
of it, and the finding through a real job on CPU."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch

from nsight_core.collectors import get_backend
from nsight_core.collectors.events import (
    OUTPUT_CHANGED,
    Device,
)
from nsight_core.collectors.events_samples import EVENTS_LATENCY
from nsight_core.collectors.late import AFTER_FLOOR_NS, AFTER_REL, late_work_reason
from nsight_core.collectors.timers import call_timer, tampering_affects
from nsight_core.collectors.window_guard import THREAD_WAIT_S
from nsight_core.contestant.integrity import Watch
from nsight_core.errors import NsightCoreError
from nsight_core.pipeline import run_profile_job
from nsight_core.plan.config import EngineConfig
from nsight_core.protocol import EVENTS_METRIC, RunKey
from nsight_core.request import ProfileRequest
from nsight_core.settings import JobSettings

KEY = RunKey("cand", 0, 0)


def test_work_after_the_window_is_judged_on_the_median_of_a_configs_calls() -> None:
    floor = AFTER_FLOOR_NS
    # An honest call's after-window time is noise around zero; one wake-up preempted by
    # the OS does not flag a candidate, work left behind on every call does.
    assert late_work_reason(0, [(10_000.0, 0.0), (10_000.0, 3 * floor), (10_000.0, 500.0)]) is None
    flagged = late_work_reason(2, [(10_000.0, 2 * floor)] * 3)
    assert flagged is not None
    assert "config 2" in flagged and f"{2 * floor / 1e3:.3g} us" in flagged
    # Relative to the window: a long call's wake-ups vary more.
    window = 10 * floor / AFTER_REL
    assert late_work_reason(0, [(window, 2 * floor)] * 3) is None
    assert late_work_reason(0, [(window, 11 * floor)] * 3) is not None
    # Nothing measured (ncu, cupy): nothing to say.
    assert late_work_reason(0, [(1.0, None), (None, None)]) is None
    assert late_work_reason(0, []) is None


def test_the_reason_says_where_the_work_after_the_window_ran() -> None:
    # The parts each call reported (`WindowGuard.after_parts`): the Reason names those whose
    # median is not zero, so an agent knows what to join.
    from nsight_core.collectors.window_guard import AFTER_PARTS

    floor = AFTER_FLOOR_NS
    parts = [{"stream": 0.0, "copy": 0.0, "device": 3 * floor, "thread": 0.0}] * 2 + [
        {"stream": 0.0, "copy": floor, "device": 0.0, "thread": 0.0}
    ]
    reason = late_work_reason(0, [(10_000.0, 3 * floor)] * 3, parts)
    assert reason is not None
    assert f"{AFTER_PARTS['device']} {3 * floor / 1e3:.3g} us" in reason
    assert AFTER_PARTS["copy"] not in reason and AFTER_PARTS["stream"] not in reason


def test_the_host_clock_waits_for_threads_the_call_left_running_and_reads_the_output_back() -> None:
    release = threading.Event()

    def leaves_a_thread() -> torch.Tensor:
        out = torch.zeros(8)

        def finish() -> None:
            release.wait(5)
            time.sleep(0.01)
            out.fill_(1.0)

        threading.Thread(target=finish, daemon=True).start()
        release.set()
        return out

    timed = call_timer("clock").time_call(Device("cpu"), KEY, leaves_a_thread)
    # The thread ran on for at least its 10 ms after the call returned, and it wrote the
    # output after the window closed.
    assert timed.after_ns is not None and 0.01e9 <= timed.after_ns <= THREAD_WAIT_S * 1e9 + 1e8
    assert timed.changed_after() == [OUTPUT_CHANGED]
    assert timed.latency_ns == timed.ns

    def joins_its_thread() -> torch.Tensor:
        out = torch.zeros(8)
        worker = threading.Thread(target=out.fill_, args=(1.0,))
        worker.start()
        worker.join()
        return out

    honest = call_timer("clock").time_call(Device("cpu"), KEY, joins_its_thread)
    assert honest.after_ns == 0.0 and honest.changed_after() == []


def _settings(metrics: list[str]) -> JobSettings:
    request = ProfileRequest.model_validate(
        {
            "reference": "r",
            "candidates": ["c"],
            "inputs": "m",
            "source": "",
            "backend": "events",
            "metrics": metrics,
        }
    )
    return JobSettings.of_request(request)


def test_events_reports_the_host_inclusive_latency_when_asked_and_time_by_default() -> None:
    events = get_backend("events")
    default = _settings(["gpu__time_duration.sum"])
    events.preflight(default, EngineConfig.from_env())
    assert events.measures(default) == [EVENTS_METRIC]
    samples = events.call_samples(KEY, 5.0, [], default, latency_ns=9.0)
    assert [(s.metric, s.value) for s in samples] == [(EVENTS_METRIC, 5.0)]
    both = _settings([EVENTS_LATENCY, EVENTS_METRIC])
    events.preflight(both, EngineConfig.from_env())
    assert events.measures(both) == [EVENTS_METRIC, EVENTS_LATENCY]
    samples = events.call_samples(KEY, 5.0, [], both, latency_ns=9.0)
    assert [(s.metric, s.value) for s in samples] == [(EVENTS_METRIC, 5.0), (EVENTS_LATENCY, 9.0)]
    # A timer that measured no latency (cupy arguments) leaves that metric's sample out.
    assert [s.metric for s in events.call_samples(KEY, 5.0, [], both)] == [EVENTS_METRIC]
    with pytest.raises(NsightCoreError) as err:
        events.preflight(_settings([EVENTS_LATENCY, "dram__bytes.sum"]), EngineConfig.from_env())
    assert err.value.error_class == "invalid_request"


REFERENCE = """
import torch

def make_inputs(n):
    return (torch.randn(n, 64),)

def ref(x):
    return torch.softmax(x, dim=-1)
"""
CANDIDATES = """
import threading
import time

import torch

def lingers(x):
    # Correct, but leaves a thread working on after the call returned.
    threading.Thread(target=time.sleep, args=(0.05,), daemon=True).start()
    return torch.softmax(x, dim=-1)

def honest(x):
    return torch.softmax(x, dim=-1)
"""


def test_a_candidate_that_leaves_work_running_after_it_returns_is_suspicious(
    tmp_path: Path,
) -> None:
    request = ProfileRequest(
        reference="ref",
        candidates=["lingers", "honest"],
        inputs="make_inputs",
        source=CANDIDATES,
        reference_source=REFERENCE,
        configs=[{"n": 32}],
        runs=3,
        backend="events",
        metrics=[EVENTS_METRIC, EVENTS_LATENCY],
    )
    result = run_profile_job(request, tmp_path / "job", result_id="t")
    assert result.status == "done", result.message
    rows = {(r.Annotation, r.Metric): r for r in result.rows}
    assert {m for _a, m in rows} == {EVENTS_METRIC, EVENTS_LATENCY}
    assert all(r.NumRuns == 3 for r in result.rows)
    for metric in (EVENTS_METRIC, EVENTS_LATENCY):
        lingers = rows[("lingers", metric)]
        assert lingers.Trust == "suspicious"
        assert any("work ran after the timed window closed" in x for x in lingers.Reasons)
        for ann in ("ref", "honest"):
            assert rows[(ann, metric)].Trust in ("ok", "noisy"), rows[(ann, metric)].Reasons
    # On a CPU the call's latency is its time.
    honest = rows[("honest", EVENTS_METRIC)]
    assert rows[("honest", EVENTS_LATENCY)].RawValues == honest.RawValues


class _Harness:
    """Stands for the contestant's harness: a device of ours, its guard bound."""

    def __init__(self) -> None:
        self.device = Device("torch-cuda", "cuda:0 (test)")


def test_the_guards_streams_and_copy_cost_are_watched_once_bound() -> None:
    # Bound at the reference's first timed call, before the watch starts: a candidate that
    # empties the list of streams (its work would run during the hold again) or inflates
    # the honest copy (work in the copy would go unseen) is named.
    harness = _Harness()
    guard = harness.device.window_guard
    guard.streams, guard.copy_base_ns, guard.copy_ns_per_byte = [object()], 2_000.0, 0.01
    watch = Watch()
    watch.watch_state(harness)
    assert watch.changes() == []
    guard.streams = []
    guard.copy_ns_per_byte = 1e9
    found = watch.changes()
    assert any(
        f.startswith("nsight_core.collectors.window_guard.WindowGuard().streams") for f in found
    )
    assert any("WindowGuard().copy_ns_per_byte" in f for f in found)
    assert tampering_affects(get_backend("events"), found[0]) == "timer"


def test_work_after_the_window_is_what_the_device_did_beyond_the_hosts_own_time() -> None:
    # The readings of `Device._time_guarded` on a GPU, as numbers: on an idle device an
    # interval between two records is the host's own time between them, which counts for
    # nothing; work queued behind the end event, a copy longer than the host's time and two
    # honest copies, a tail beyond the noise allowance and a thread still running do count.
    from nsight_core.collectors.window_guard import (
        RECORD_SLACK_NS,
        TAIL_NOISE_NS,
        AfterWindow,
        WindowGuard,
    )

    guard = WindowGuard(streams=[], copy_base_ns=2_000.0, copy_ns_per_byte=0.001)
    nbytes = 1 << 20  # an honest copy: 2 us + 1.05 us

    def after(**kw: float) -> float:
        base = dict(
            gap_ns=4_000.0, host_gap_ns=4_000.0, copy_ns=3_000.0, host_copy_ns=9_000.0,
            rest_ns=20_000.0, outlived_ns=0.0,
        )  # fmt: skip
        return sum(guard.after_parts(AfterWindow(**{**base, **kw}), nbytes).values())

    assert after() == 0.0  # idle device, honest copy, quiet tail
    assert after(gap_ns=30_000.0) == 30_000.0 - 4_000.0 - RECORD_SLACK_NS
    assert after(copy_ns=40_000.0) == 40_000.0 - 9_000.0 - RECORD_SLACK_NS
    assert after(copy_ns=40_000.0, host_copy_ns=1_000.0) == 40_000.0 - 2 * 3_048.576
    assert after(rest_ns=TAIL_NOISE_NS + 7_000.0) == 7_000.0
    assert after(outlived_ns=55_000.0) == 55_000.0


def test_each_caller_has_stream_holds_of_its_own_length() -> None:
    # One candidate whose calls take 20 ms on the host must not hold the others' calls that
    # long: on the H200 a shared job's honest candidates then waited 50 ms per call and the
    # host's late wake-up read as work after their windows. The hold's sleeping kernel is
    # torch.cuda._sleep on a GPU; here a list records the cycles asked of it.
    from types import SimpleNamespace

    from nsight_core.collectors.events import (
        HOLD_FIRST_NS,
        HOLD_MARGIN,
        HOLD_MAX_NS,
        HOLD_MIN_NS,
        StreamHold,
    )

    asked: list[int] = []
    hold = StreamHold(ns_per_cycle=2.0, sleep=asked.append)
    gpu = SimpleNamespace(cuda=SimpleNamespace())
    assert hold.hold(gpu, "slow") == HOLD_FIRST_NS  # nothing seen of it yet
    hold.launched(20e6, HOLD_FIRST_NS, "slow")
    assert hold.unheld == 1  # its launch outlasted the hold: that sample is unheld
    assert hold.hold(gpu, "slow") == HOLD_MAX_NS
    assert hold.hold(gpu, "fast") == HOLD_FIRST_NS
    hold.launched(20_000.0, HOLD_FIRST_NS, "fast")
    assert hold.hold(gpu, "fast") == HOLD_MIN_NS
    hold.launched(100_000.0, HOLD_MIN_NS, "fast")
    assert hold.hold(gpu, "fast") == HOLD_MARGIN * 100_000.0
    assert hold.unheld == 2
    assert asked[-1] == int(HOLD_MARGIN * 100_000.0 / 2.0)
