"""The GPU's SM clock and temperature around timed runs: the judge's readings and the rows' rule.

On CPU there are no readings: a real events job must still end 'done', its rows without a
GpuState, and its provenance with one note saying why. The rule is driven by real
`GpuStateEvent` lines written and read back as the pipeline does (events.jsonl).
"""

from __future__ import annotations

from pathlib import Path

from nsight_core.judge.gpu_state import NOT_READ, GpuSampler, Reading
from nsight_core.pipeline import run_profile_job
from nsight_core.protocol import GpuStateEvent, RunKey
from nsight_core.request import ProfileRequest
from nsight_core.results import Row
from nsight_core.rows.gpu_state import CLOCK_MOVED_PCT, apply_gpu_states, unsteady_reason
from nsight_core.rows.runs import read_events
from nsight_core.runtime.process import EventWriter

SOURCE = """
import numpy as np

def make_inputs(n):
    return (np.random.rand(n),)

def ref(x):
    return x * 2.0

def cand(x):
    return x + x
"""

ANN = "c.py:f"


def _row(trust: str = "ok", reasons: list[str] | None = None, config_id: int = 0) -> Row:
    return Row.model_validate(
        {
            "Annotation": ANN, "ConfigId": config_id, "Params": {}, "Metric": "m", "Unit": "ns",
            "AvgValue": 1.0, "MedianValue": 1.0, "StdDev": 0.0, "MinValue": 1.0,
            "MaxValue": 1.0, "NumRuns": 3, "RequestedRuns": 3, "RelativeStdDevPct": 0.0,
            "CI95_Lower": 1.0, "CI95_Upper": 1.0, "StableMeasurement": True, "Kernel": "call",
            "Backend": "events", "Evidence": "in_process", "Trust": trust,
            "Reasons": reasons or [],
        }
    )  # fmt: skip


def _event(
    run: int, sm: tuple[int | None, int | None], temp: tuple[int, int], *reasons: str
) -> GpuStateEvent:
    return GpuStateEvent(
        annotation=ANN,
        config_id=0,
        run=run,
        sm_mhz=list(sm),
        temp_c=list(temp),
        reasons=[["gpu_idle"], list(reasons)],
    )


def _through_events_file(tmp_path: Path, events: list[GpuStateEvent]) -> list[GpuStateEvent]:
    """The events as the pipeline reads them back from the judge's events.jsonl."""
    path = tmp_path / "events.jsonl"
    with EventWriter(path) as writer:
        for e in events:
            writer.emit(e)
    return read_events(path).gpu_states


def test_an_events_job_without_gpu_readings_ends_done_and_says_why_once(tmp_path: Path) -> None:
    request = ProfileRequest(
        reference="ref",
        candidates=["cand"],
        inputs="make_inputs",
        source=SOURCE,
        reference_source=SOURCE,
        configs=[{"n": 64}],
        runs=3,
        backend="events",
    )
    result = run_profile_job(request, tmp_path / "job", result_id="t")
    assert result.status == "done", result.message
    assert result.rows and all(r.GpuState is None for r in result.rows)
    assert all(r.NumRuns == 3 for r in result.rows)
    assert result.provenance is not None
    notes = [n for n in result.provenance.notes if n.startswith(NOT_READ)]
    assert len(notes) == 1, result.provenance.notes  # no NVML here, or the calls ran on the CPU
    assert result.provenance.phase_seconds["nvml"] == 0.0  # nothing read, nothing spent


def test_steady_runs_give_the_row_its_clock_and_temperature_and_leave_its_trust(
    tmp_path: Path,
) -> None:
    events = _through_events_file(
        tmp_path, [_event(r, (1980, 1980), (40 + r, 41 + r)) for r in range(3)]
    )
    (row,) = apply_gpu_states([_row()], events)
    assert (row.Trust, row.Reasons) == ("ok", [])
    assert row.GpuState is not None
    assert row.GpuState.SmClockMHz == [1980, 1980]
    assert row.GpuState.SmClockStartEndMHz == [1980, 1980]
    assert row.GpuState.TempC == [40, 43]
    assert row.GpuState.Throttle == []  # gpu_idle at every start is no slowdown


def test_a_clock_that_fell_during_the_runs_makes_the_row_noisy_and_names_the_runs(
    tmp_path: Path,
) -> None:
    events = _through_events_file(
        tmp_path,
        [
            _event(0, (1980, 1980), (60, 62)),
            _event(1, (1980, 1965), (62, 65)),  # within the noise
            _event(2, (1920, 1755), (65, 70), "sw_thermal_slowdown"),
            _event(3, (1755, 1755), (70, 71), "sw_thermal_slowdown"),
        ],
    )
    (row, other) = apply_gpu_states([_row(), _row(config_id=1)], events)
    assert row.Trust == "noisy"
    (reason,) = row.Reasons
    assert "SM clock 1980->1755 MHz" in reason and "runs 2-3" in reason
    assert "sw_thermal_slowdown in runs 2-3" in reason and "60-71 C" in reason
    assert row.GpuState is not None and row.GpuState.SmClockStartEndMHz == [1980, 1755]
    assert row.GpuState.Throttle == ["sw_thermal_slowdown"]
    assert (other.Trust, other.GpuState) == ("ok", None)  # config 1 had no readings


def test_a_slowdown_reason_alone_makes_the_row_noisy_and_a_suspicious_row_stays_suspicious(
    tmp_path: Path,
) -> None:
    events = _through_events_file(
        tmp_path, [_event(r, (1755, 1755), (50, 50), "sw_power_cap") for r in range(3)]
    )
    reason = unsteady_reason(events)
    assert reason is not None and "sw_power_cap in runs 0-2" in reason
    assert "SM clock" not in reason  # the clock held still, at the cap
    noisy, suspicious = apply_gpu_states([_row(), _row("suspicious", ["timer rebound"])], events)
    assert (noisy.Trust, noisy.Reasons) == ("noisy", [reason])
    assert (suspicious.Trust, suspicious.Reasons) == ("suspicious", ["timer rebound", reason])


def test_a_clock_within_the_threshold_and_failed_reads_are_no_reason(tmp_path: Path) -> None:
    just_under = int(1980 * (1 - CLOCK_MOVED_PCT / 100)) + 1
    events = _through_events_file(
        tmp_path, [_event(0, (1980, just_under), (50, 50)), _event(1, (None, None), (50, 51))]
    )
    assert unsteady_reason(events) is None
    (row,) = apply_gpu_states([_row()], events)
    assert row.Trust == "ok" and row.GpuState is not None
    assert row.GpuState.SmClockMHz == [just_under, 1980]


def test_the_sampler_reads_only_timed_gpu_calls_and_a_failed_read_is_null_and_noted() -> None:
    calls: list[Reading | Exception] = [Reading(1980, 45, ("gpu_idle",)), RuntimeError("lost")]

    def reader() -> Reading:
        got = calls.pop(0)
        if isinstance(got, Exception):
            raise got
        return got

    sampler = GpuSampler(reader)
    key = RunKey(ANN, 0, 2)
    sampler.start(key, "cuda:0 (NVIDIA H200)")
    sampler.stop()
    assert sampler.take(RunKey(ANN, 0, 1)) == []  # not the call that was read
    (event,) = sampler.take(key)
    assert (event.sm_mhz, event.temp_c) == ([1980, None], [45, None])
    assert event.reasons == [["gpu_idle"], []]
    assert sampler.take(key) == []  # taken once
    assert sampler.readings == 2 and sampler.notes() == [
        "an NVML reading of the GPU failed, its values are null: lost"
    ]
    on_cpu = GpuSampler(reader)
    on_cpu.start(key, "cpu")
    on_cpu.stop()
    assert on_cpu.take(key) == [] and on_cpu.readings == 0
    assert on_cpu.notes() == [f"{NOT_READ}: the calls ran on the CPU"]
    without_nvml = GpuSampler(None, "NVML unavailable: no driver")
    without_nvml.start(key, "cuda:0")
    without_nvml.stop()
    assert without_nvml.take(key) == []
    assert without_nvml.notes() == [f"{NOT_READ}: NVML unavailable: no driver"]
    without_nvml.start(key, "cpu")  # a CPU job's reason comes first: no GPU was used
    assert without_nvml.notes() == [f"{NOT_READ}: the calls ran on the CPU"]


def test_ncu_jobs_are_not_read_and_carry_no_note() -> None:
    """Under ncu the readings around a replayed call would describe ncu's passes."""
    sampler = GpuSampler.for_backend("external")
    sampler.start(RunKey(ANN, 0, 0), "cuda:0")
    sampler.stop()
    assert sampler.take(RunKey(ANN, 0, 0)) == [] and sampler.notes() == []
