"""What an agent reads when it gets a name wrong, and where a request's time went (issue 24,
items 6 and 7): through the real MCP client in memory, real jobs on the events backend."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from nspy_mcp.devices import CPU_SLOT, DeviceLocks, gpu_slot
from tests.mcp.test_server import MODES, connected, error_text, softmax_request, structured

pytestmark = pytest.mark.anyio


@MODES
async def test_an_unknown_tool_name_gets_the_nearest_names(mode: str, tmp_path: Path) -> None:
    async with connected(tmp_path, mode) as client:
        typo = error_text(await client.call_tool("profile_candidate", {}))
        far = error_text(await client.call_tool("frobnicate", {}))
    assert typo.startswith("invalid_request: unknown tool 'profile_candidate'")
    assert "To fix: did you mean 'profile_candidates'?" in typo
    assert far.startswith("invalid_request: unknown tool 'frobnicate'") and "To fix:" in far
    for text in (typo, far):  # both list what there is
        assert "'check_environment'" in text and "'read_results'" in text


@MODES
@pytest.mark.parametrize("arg", ["wait", "wait_s"])
async def test_a_top_level_wait_points_at_request_wait_s(
    mode: str, arg: str, tmp_path: Path
) -> None:
    async with connected(tmp_path, mode) as client:
        text = error_text(
            await client.call_tool("profile_candidates", {"request": softmax_request(), arg: 5})
        )
        runs = error_text(
            await client.call_tool("profile_candidates", {"request": softmax_request(), "runs": 3})
        )
        listing = structured(await client.call_tool("read_results", {}))
    assert text.startswith(f"invalid_request: unknown argument(s) ['{arg}']"), text
    assert f"To fix: '{arg}' -> did you mean request.wait_s? It goes inside request" in text
    assert "did you mean request.runs?" in runs
    assert listing["total"] == 0  # nothing was queued


async def test_a_second_request_right_after_the_first_shows_its_wait_apart_from_wall_time(
    tmp_path: Path,
) -> None:
    """The second request waits for the judge pre-started when the first ended; that wait
    is in `waited_seconds` and `waits`, not hidden, and not in `wall_seconds`."""
    answers: list[tuple[float, dict[str, Any]]] = []
    async with connected(tmp_path) as client:
        with anyio.fail_after(240):
            for _ in range(2):
                t0 = time.monotonic()
                result = await client.call_tool(
                    "profile_candidates", {"request": softmax_request()}
                )
                answers.append((time.monotonic() - t0, structured(result)))
    for _, answer in answers:
        assert answer["status"] == "done", answer["message"]
        prov = answer["provenance"]
        assert prov["queued_seconds"] is not None and prov["waited_seconds"] is not None
        assert prov["waited_seconds"] == pytest.approx(sum(prov["waits"].values()), abs=0.002)
    elapsed, second = answers[1]
    prov = second["provenance"]
    assert prov["waits"].get("standby", 0) > 0, prov
    assert prov["waited_seconds"] > 0
    # Waiting and running are disjoint parts of the call's time.
    assert elapsed >= prov["waited_seconds"] + prov["wall_seconds"] - 0.01
    assert prov["phase_seconds"]["spawn"] == 0  # it did run on the pre-started judge


async def test_device_lock_waits_are_split_into_this_servers_queue_and_other_processes(
    tmp_path: Path,
) -> None:
    locks = DeviceLocks(tmp_path, gpus=[CPU_SLOT])
    waits: dict[str, float] = {}
    holding = anyio.Event()

    async def first() -> None:
        async with locks.take(None, lambda _: None):
            holding.set()
            await anyio.sleep(0.3)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            await holding.wait()
            async with locks.take(None, lambda _: None, waits):
                pass
    assert set(waits) == {"queue"} and waits["queue"] >= 0.2

    gpu = gpu_slot(0)
    other = os.open(tmp_path / f"{gpu.key}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another process's lock, in effect
    waits.clear()

    async def release_later() -> None:
        await anyio.sleep(0.4)
        os.close(other)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(release_later)
            async with DeviceLocks(tmp_path, gpus=[gpu]).take(gpu, lambda _: None, waits):
                pass
    assert set(waits) == {"device"} and waits["device"] >= 0.2
