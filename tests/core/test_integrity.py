"""The integrity watch: the timing path's functions and state, and files that shadow modules."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy  # noqa: F401  (the harness imports it before any user code)
import pytest
import torch

from nsight_core.collectors import events, get_backend
from nsight_core.collectors.events import Device
from nsight_core.collectors.timers import RangeTimer, call_timer, tampering_affects
from nsight_core.contestant.integrity import Watch, harness_module_names, shadowing_files


def test_only_modules_the_harness_imported_are_shadowed_never_main(tmp_path: Path) -> None:
    for name in ("__main__.py", "numpy.py", "json.py", "csvkit_like.py", "mailbox.py"):
        (tmp_path / name).write_text("")
    pkg = tmp_path / "pytest"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    harness = harness_module_names()
    assert "__main__" not in harness and "numpy" in harness and "json" in harness
    assert "mailbox" not in sys.modules  # a standard module nothing here imported
    found = shadowing_files([tmp_path], harness)
    named = {line.split(" shadows ")[0].rsplit("/", 1)[-1] for line in found}
    # A package's own __main__.py (nspy_mcp has one) and look-alikes of modules nothing
    # imported are plain user files; numpy, json and pytest were imported first.
    assert named == {"numpy.py", "json.py", "pytest"}, found


# -- the timing path's state: instance attributes, buffers, module data -------------------


class _Harness:
    """Stands for the contestant's harness: it holds a timer and a device of ours."""

    def __init__(self) -> None:
        self.timer = call_timer("clock")
        self.device = Device("torch-cuda", "cuda:0 (test)")
        self.calls = 0  # changes by design: named volatile below


def _watched() -> tuple[_Harness, Watch]:
    harness = _Harness()
    watch = Watch()
    watch.watch_state(harness, volatile=("calls",))
    return harness, watch


@pytest.fixture
def flush_buffers() -> Iterator[dict[str, Any]]:
    saved = dict(events._FLUSH_BUFFERS)
    events._FLUSH_BUFFERS.clear()
    events._FLUSH_BUFFERS["torch-cuda"] = torch.zeros(1 << 12)
    yield events._FLUSH_BUFFERS
    events._FLUSH_BUFFERS.clear()
    events._FLUSH_BUFFERS.update(saved)


@pytest.mark.usefixtures("flush_buffers")
def test_an_untouched_timing_path_and_volatile_attributes_report_nothing() -> None:
    harness, watch = _watched()
    harness.calls += 3
    torch._a_candidates_own_attribute = 1  # type: ignore[attr-defined]  # new, not a change
    try:
        assert watch.changes() == []
    finally:
        del torch._a_candidates_own_attribute  # type: ignore[attr-defined]


@pytest.mark.usefixtures("flush_buffers")
def test_instance_attributes_of_the_timer_and_the_device_are_watched_and_named() -> None:
    harness, watch = _watched()
    timer: Any = harness.timer
    timer.time_call = lambda *a: None  # shadows the class's method on this instance only
    harness.device.kind = "cpu"  # no flush, a host clock around asynchronous launches
    found = watch.changes()
    assert "nsight_core.collectors.timers.ClockTimer().time_call (set on the instance)" in found
    assert "nsight_core.collectors.events.Device().kind ('torch-cuda' -> 'cpu')" in found
    timer._time_call = lambda *a: None
    assert "nsight_core.collectors.timers.ClockTimer()._time_call (replaced)" in watch.changes()


@pytest.mark.usefixtures("flush_buffers")
def test_the_stream_hold_runs_before_the_window_so_its_state_is_watched_but_what_moves() -> None:
    """The events timer's stream hold runs before the start event: candidate work hidden in
    it would be untimed. Its bound sleeping kernel, its methods and attributes set on it
    are watched; the lengths each call moves are not findings."""
    harness = _Harness()
    hold: Any = harness.device.stream_hold
    # As after the reference's first timed call, when the watch starts: the kernel is bound.
    hold.sleep, hold.ns_per_cycle = (lambda cycles: None), 0.5
    watch = Watch()
    watch.watch_state(harness, volatile=("calls",))
    hold.unheld = 1  # each call moves these
    hold.longest["cand"] = 1e5
    assert watch.changes() == []
    hold.sleep = lambda cycles: None  # the candidate's work, before the window opens
    hold.hold = lambda torch: 0.0  # shadows the method on this instance only
    found = watch.changes()
    assert "nsight_core.collectors.events.StreamHold().sleep (replaced)" in found
    assert "nsight_core.collectors.events.StreamHold().hold (set on the instance)" in found
    assert tampering_affects(get_backend("events"), found[0]) == "timer"


def test_swapping_the_timer_object_or_its_class_is_named() -> None:
    harness, watch = _watched()
    harness.timer = call_timer("clock")
    assert watch.changes() == [f"{__name__}._Harness().timer (replaced)"]
    harness2, watch2 = _watched()
    harness2.timer.__class__ = RangeTimer
    assert watch2.changes() == [
        "nsight_core.collectors.timers.ClockTimer() (its class was changed to RangeTimer)"
    ]


def test_the_flush_buffer_swapped_resized_or_shadowed_is_named(
    flush_buffers: dict[str, Any],
) -> None:
    name = "nsight_core.collectors.events._FLUSH_BUFFERS"
    _, watch = _watched()
    flush_buffers["torch-cuda"] = torch.zeros(16)
    assert watch.changes() == [f"{name} (['torch-cuda'] replaced)"]
    _, watch = _watched()
    flush_buffers["torch-cuda"].resize_(4)
    assert watch.changes() == [f"{name} (['torch-cuda'] resized: (16,) -> (4,))"]
    _, watch = _watched()
    flush_buffers["torch-cuda"].sum = lambda: 0
    assert watch.changes() == [f"{name} (['torch-cuda'] attribute set on it: sum)"]
    _, watch = _watched()
    flush_buffers["cupy"] = torch.zeros(1)
    assert watch.changes() == [f"{name} (['cupy'] added)"]


def test_plain_data_of_the_timing_modules_is_watched() -> None:
    _, watch = _watched()
    factor = events.L2_FLUSH_FACTOR
    events.L2_FLUSH_FACTOR = 0
    try:
        assert watch.changes() == [
            f"nsight_core.collectors.events.L2_FLUSH_FACTOR ({factor!r} -> 0)"
        ]
    finally:
        events.L2_FLUSH_FACTOR = factor
    assert watch.changes() == []
