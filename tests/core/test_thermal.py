"""The thermal guard's waiting logic, driven by real reader, sleep and clock functions."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nsight_core.host.thermal import (
    GuardRecord,
    ThermalGuard,
    ThermalReading,
    ThermalSettings,
    reasons_of_mask,
    summarize,
)


class Bench:
    """A GPU that cools along a script of readings, and a clock that only sleep advances."""

    def __init__(self, readings: list[ThermalReading]) -> None:
        self._readings: Iterator[ThermalReading] = iter(readings)
        self._last = readings[-1]
        self.now = 0.0
        self.reads = 0
        self.sleeps: list[float] = []

    def read(self) -> ThermalReading:
        self.reads += 1
        self._last = next(self._readings, self._last)
        return self._last

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s

    def clock(self) -> float:
        return self.now

    def guard(self, settings: ThermalSettings | None = None) -> ThermalGuard:
        return ThermalGuard(
            settings or ThermalSettings(), self.read, sleep=self.sleep, clock=self.clock
        )


def at(temp: float, headroom: float, *reasons: str) -> ThermalReading:
    return ThermalReading(temp, headroom, tuple(reasons))


def test_a_cool_gpu_runs_at_once() -> None:
    bench = Bench([at(45, 40, "gpu_idle")])
    rec = bench.guard().check()
    assert (rec.status, rec.waited_s, rec.temp_c, rec.reasons) == ("ok", 0.0, 45, [])
    assert bench.sleeps == []


def test_a_hot_gpu_waits_until_the_resume_headroom_and_records_the_hottest_reading() -> None:
    bench = Bench([at(85, 5), at(88, 2), at(80, 12), at(74, 18), at(70, 22)])
    rec = bench.guard().check()
    assert rec.status == "waited"
    assert rec.waited_s == pytest.approx(2.0)  # four polls of 0.5 s
    assert rec.temp_c == 88 and rec.headroom_c == 22


def test_a_thermal_slowdown_reason_waits_even_with_headroom_and_is_recorded() -> None:
    bench = Bench([at(60, 30, "sw_thermal_slowdown"), at(60, 30, "sw_power_cap"), at(58, 32)])
    rec = bench.guard().check()
    assert rec.status == "waited"
    assert rec.reasons == ["sw_thermal_slowdown", "sw_power_cap"]


def test_a_gpu_that_never_cools_is_let_go_at_the_timeout_then_the_budget_stops_waiting() -> None:
    bench = Bench([at(90, 1)])
    guard = bench.guard(ThermalSettings(timeout_s=3.0, budget_s=4.0))
    first = guard.check()
    assert first.status == "timed_out" and first.waited_s == pytest.approx(3.0)
    assert "still hot after 3.0 s (the wait limit)" in first.note
    second = guard.check()  # 1 s of budget left: the wait is cut to it
    assert second.status == "timed_out" and second.waited_s == pytest.approx(1.0)
    assert "call's budget" in second.note
    third = guard.check()
    assert third.status == "budget_spent" and third.waited_s == 0.0
    assert bench.now == pytest.approx(4.0)


def test_no_reader_and_mode_off_say_so_plainly() -> None:
    unavailable = ThermalGuard(ThermalSettings(), None, unavailable="NVML unavailable: no driver")
    assert unavailable.check() == GuardRecord("unavailable", note="NVML unavailable: no driver")
    off = ThermalGuard(ThermalSettings(mode="off"), Bench([at(90, 1)]).read)
    assert off.check().status == "off"


def test_a_failing_reader_makes_the_run_go_on_unguarded() -> None:
    def broken() -> ThermalReading:
        raise OSError("GPU is lost")

    rec = ThermalGuard(ThermalSettings(), broken).check()
    assert rec.status == "unavailable" and "GPU is lost" in rec.note


def test_reason_bits_follow_nvml() -> None:
    assert reasons_of_mask(0x1 | 0x20 | 0x40) == (
        "gpu_idle", "sw_thermal_slowdown", "hw_thermal_slowdown",
    )  # fmt: skip


def test_summaries_keep_the_worst_status_and_the_total_wait_per_config() -> None:
    def rec(cid: int, status: str, waited: float, temp: float) -> GuardRecord:
        return GuardRecord(status, waited, temp, 20.0, ["sw_power_cap"], "", cid, 0)  # type: ignore[arg-type]

    out = summarize([rec(0, "ok", 0, 50), rec(0, "waited", 1.5, 80), rec(1, "ok", 0, 40)])
    assert (out[0].status, out[0].waited_s, out[0].temp_c) == ("waited", 1.5, 80)
    assert out[0].reasons == ["sw_power_cap"] and out[1].status == "ok"
