"""Job queue parts: progress folding and one job at a time per device (tests/mcp/test_dispatch.py:
placing jobs on several GPUs)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import anyio
import pytest

from nsight_core.protocol import ProgressEvent
from nsight_core.request import ProfileRequest
from nspy_mcp.devices import DeviceLocks, GpuSlot
from nspy_mcp.progress import ProgressTracker

pytestmark = pytest.mark.anyio


def _request(configs: int = 2) -> ProfileRequest:
    return ProfileRequest(
        reference="ref.py:f",
        candidates=["cand.py:g"],
        inputs="ref.py:make",
        configs=[{"n": i} for i in range(configs)],
        backend="events",
    )


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_rises_monotonically_across_phases_and_estimates_time_left() -> None:
    clock = _Clock()
    tracker = ProgressTracker(_request(configs=2), clock=clock)
    events = [
        ProgressEvent(phase="check", config_id=0, done=3, total=3),
        ProgressEvent(phase="check", config_id=1, done=3, total=3),
        ProgressEvent(phase="profile", annotation="cand.py:g", config_id=0, run=0, done=2, total=8),
        ProgressEvent(phase="profile", annotation="ref.py:f", config_id=1, run=3, done=8, total=8),
    ]
    seen = []
    for step, ev in enumerate(events):
        clock.now += 1.0 if step < 2 else 2.0
        seen.append(tracker.update(ev))

    values = [u.progress for u in seen]
    assert values == sorted(values) and values[-1] == 100.0
    assert seen[1].eta_s is None  # no estimate before profiling starts
    # 2 of 8 calls took 2 s since the checks ended: 6 more take about 6 s.
    assert seen[2].eta_s == pytest.approx(6.0)
    assert seen[2].message == "profile cand.py:g config 0 run 0 (2/8 calls)"
    assert seen[2].eta_text() == "about 6 s left"
    assert seen[3].eta_s == 0.0


def test_the_time_left_counts_down_and_a_stalled_job_says_it_is_past_its_estimate() -> None:
    """Issue 41: a hang read "53 %, about 1 s left" at 60 s and again at 360 s."""
    clock = _Clock()
    tracker = ProgressTracker(_request(configs=1), clock=clock)
    tracker.update(ProgressEvent(phase="check", config_id=0, done=2, total=2))
    clock.now += 2.0
    tracker.update(ProgressEvent(phase="profile", config_id=0, run=0, done=2, total=8))
    assert tracker.latest.eta_text() == "about 6 s left"
    clock.now += 4.0
    assert tracker.latest.eta_text() == "about 2 s left"
    clock.now += 56.0  # no event for a minute: a call hangs
    late = tracker.latest
    assert late.eta_s == 0.0 and late.overdue_s == pytest.approx(54.0)
    assert late.eta_text().startswith("54 s past its estimate: a call is slow or hung")


def test_a_state_note_keeps_the_progress_already_reached() -> None:
    tracker = ProgressTracker(_request())
    tracker.update(ProgressEvent(phase="profile", done=1, total=2))
    note = tracker.note("queued: another nspy-mcp process is using gpu-0")
    assert note.progress == tracker.latest.progress > 0
    assert note.message.startswith("queued")


async def slot_named(locks: DeviceLocks, key: str) -> GpuSlot:
    """The slot with this lock name, as a request naming it would get (a GPU this host
    lacks is still a lock of that name)."""
    return next((s for s in await locks.slots() if s.key == key), GpuSlot(key))


async def test_jobs_of_one_server_on_one_device_run_one_at_a_time(tmp_path: Path) -> None:
    locks = DeviceLocks(tmp_path)
    order: list[str] = []
    first_in = anyio.Event()
    release = anyio.Event()
    second_waits = anyio.Event()

    async def first() -> None:
        async with locks.take(await slot_named(locks, "cpu"), order.append):
            order.append("first in")
            first_in.set()
            await release.wait()
        order.append("first out")

    def on_wait(message: str) -> None:
        order.append(message)
        second_waits.set()

    async def second() -> None:
        await first_in.wait()
        async with locks.take(await slot_named(locks, "cpu"), on_wait):
            order.append("second in")

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            tg.start_soon(second)
            await second_waits.wait()
            release.set()

    assert order == [
        "first in",
        "queued: another job of this server is using cpu",
        "first out",
        "second in",
    ]


async def test_a_device_held_by_another_process_makes_a_job_wait_until_it_is_free(
    tmp_path: Path,
) -> None:
    # Another open file description conflicts exactly like another process's flock.
    other = os.open(tmp_path / "gpu-0.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    told = anyio.Event()
    messages: list[str] = []

    def on_wait(message: str) -> None:
        messages.append(message)
        told.set()

    entered = False

    async def job() -> None:
        nonlocal entered
        locks = DeviceLocks(tmp_path)
        async with locks.take(await slot_named(locks, "gpu-0"), on_wait):
            entered = True

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(job)
            await told.wait()
            assert not entered
            os.close(other)  # the other process ends

    assert entered
    assert messages == ["queued: another nspy-mcp process is using gpu-0"]
