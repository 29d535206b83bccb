"""Placing jobs on several GPUs: one lock per GPU, named devices, busy GPUs avoided.

There is no GPU here, so the GPU list is given explicitly (`DeviceLocks(gpus=...)`), and so
is the reading of which GPUs other processes use (`busy=`); the rest is the real code:
the real queue, real worker processes, the real MCP client.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from pydantic import ValidationError

from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.plan.config import EngineConfig
from nsight_core.request import ProfileRequest
from nspy_mcp.devices import (
    CPU_SLOT,
    DeviceLocks,
    GpuSlot,
    discover_slots,
    gpu_slot,
    resolve_device,
)
from nspy_mcp.server import build_server
from tests.mcp.test_server import error_text, structured

pytestmark = pytest.mark.anyio

UUID_A = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
UUID_B = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
TWO_GPUS = [gpu_slot(0, UUID_A, "Fake GPU A"), gpu_slot(1, UUID_B, "Fake GPU B")]


def _busy(counts: dict[int, int]) -> Callable[[], dict[int, int]]:
    return lambda: dict(counts)


def _request(**extra: Any) -> ProfileRequest:
    return ProfileRequest(
        reference="ref",
        candidates=["cand"],
        inputs="make",
        source="x = 1",
        reference_source="x = 1",
        **extra,
    )


# -- the GPU list and the request's device -----------------------------------------------------


def test_a_host_whose_cuda_visible_devices_is_empty_has_the_cpu_slot_only() -> None:
    config = EngineConfig.from_env({"CUDA_VISIBLE_DEVICES": ""})
    assert config.visible_devices == ""
    assert discover_slots(config.visible_devices) == [CPU_SLOT]
    assert discover_slots("-1") == [CPU_SLOT]


def test_device_takes_an_index_or_a_gpu_uuid_and_nothing_else() -> None:
    assert _request(device=1).device == 1
    assert _request(device=UUID_B).device == UUID_B
    for bad in ("1", True, -1, "cuda:0", "GPU-12"):
        with pytest.raises(ValidationError, match="device"):
            _request(device=bad)


def test_a_named_device_resolves_by_index_or_uuid_and_an_unknown_one_lists_the_gpus() -> None:
    assert resolve_device(None, TWO_GPUS) is None
    assert resolve_device(1, TWO_GPUS) == TWO_GPUS[1]
    assert resolve_device("GPU-" + UUID_A[4:].upper(), TWO_GPUS) == TWO_GPUS[0]
    with pytest.raises(NsightCoreError) as err:
        resolve_device(5, TWO_GPUS)
    assert err.value.error_class is ErrorClass.INVALID_REQUEST
    assert "GPU 0 (Fake GPU A" in str(err.value) and UUID_B in str(err.value)
    with pytest.raises(NsightCoreError, match="no GPU is visible"):
        resolve_device(0, [CPU_SLOT])


# -- placing -----------------------------------------------------------------------------------


async def test_concurrent_jobs_take_distinct_gpus_and_a_third_waits_for_one(
    tmp_path: Path,
) -> None:
    locks = DeviceLocks(tmp_path, gpus=TWO_GPUS, busy=_busy({}))
    got: list[GpuSlot] = []
    messages: list[str] = []
    both_in, release = anyio.Event(), anyio.Event()

    async def job(tag: str) -> None:
        async with locks.take(None, messages.append) as slot:
            got.append(slot)
            if len(got) == 2:
                both_in.set()
            if tag != "third":
                await release.wait()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(job, "first")
            tg.start_soon(job, "second")
            await both_in.wait()
            tg.start_soon(job, "third")
            await anyio.sleep(0.3)
            assert len(got) == 2  # the third waits: both GPUs are taken
            release.set()

    assert {s.visible for s in got[:2]} == {UUID_A, UUID_B}
    assert got[2] in TWO_GPUS
    assert messages == ["queued: another job of this server is using gpu-0, gpu-1"]


async def test_an_idle_gpu_is_preferred_and_a_busy_one_is_taken_only_when_none_of_ours_runs(
    tmp_path: Path,
) -> None:
    locks = DeviceLocks(tmp_path, gpus=TWO_GPUS, busy=_busy({0: 1}))
    messages: list[str] = []
    with anyio.fail_after(10):
        async with locks.take(None, messages.append) as first:
            assert first.index == 1  # GPU 0 has another process on it
            # While our job holds GPU 1, a second job waits for it rather than share GPU 0.
            with anyio.move_on_after(0.6) as scope:
                async with locks.take(None, messages.append):
                    pass
            assert scope.cancelled_caught
        async with locks.take(None, messages.append) as again:
            assert again.index == 1
            # A job that names the busy GPU gets it.
            async with locks.take(TWO_GPUS[0], messages.append) as named:
                assert named.index == 0
    assert messages == ["queued: waiting for an idle GPU (gpu-0 in use by other processes)"]
    everything_busy = DeviceLocks(tmp_path / "b", gpus=TWO_GPUS, busy=_busy({0: 2, 1: 1}))
    with anyio.fail_after(10):
        async with everything_busy.take(None, messages.append) as least_busy:
            assert least_busy.index == 1


# -- end to end, through the MCP client --------------------------------------------------------


def _barrier_request(seen: Path, **extra: Any) -> dict[str, Any]:
    """A reference that records the CUDA_VISIBLE_DEVICES it sees, then waits for a second
    job to record its own: it passes only when two jobs run at the same time."""
    source = textwrap.dedent(
        f"""
        import os, pathlib, time
        def ref(n):
            seen = pathlib.Path({str(seen)!r})
            (seen / os.environ.get("CUDA_VISIBLE_DEVICES", "unset")).touch()
            deadline = time.monotonic() + 60
            while len(list(seen.iterdir())) < 2:
                if time.monotonic() > deadline:
                    raise RuntimeError("no second job ran alongside this one")
                time.sleep(0.05)
            return n
        def cand(n):
            return n
        def make():
            return (1,)
        """
    )
    request = {
        "reference": "ref",
        "candidates": ["cand"],
        "inputs": "make",
        "source": source,
        "reference_source": source,
        "backend": "events",
        "runs": 1,
        "warmup": 0,
        "check": {"seeds": 1},
        "wait_s": 120,
    }
    return request | extra


@pytest.mark.slow  # two jobs at once on 2 cores; placement itself is checked above
async def test_two_jobs_run_at_once_each_seeing_only_its_gpu_which_rows_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NSPY_MCP_CONFINE", "0")  # the reference writes outside its workdir
    seen = tmp_path / "seen"
    seen.mkdir()
    locks = DeviceLocks(tmp_path / "locks", gpus=TWO_GPUS, busy=_busy({}))
    answers: list[dict[str, Any]] = []
    async with Client(build_server(tmp_path / "store", locks=locks)) as client:

        async def one(extra: dict[str, Any]) -> None:
            request = _barrier_request(seen, **extra)
            answers.append(
                structured(await client.call_tool("profile_candidates", {"request": request}))
            )

        with anyio.fail_after(150):
            async with anyio.create_task_group() as tg:
                tg.start_soon(one, {"device": 1})
                tg.start_soon(one, {})
            refused = await client.call_tool(
                "profile_candidates", {"request": _barrier_request(seen, device=7)}
            )

    assert sorted(p.name for p in seen.iterdir()) == [UUID_A, UUID_B]
    assert [a["status"] for a in answers] == ["done", "done"], [a["message"] for a in answers]
    by_index = {a["provenance"]["gpu_index"]: a for a in answers}
    assert sorted(by_index) == [0, 1]
    for index, answer in by_index.items():
        uuid = TWO_GPUS[index].uuid
        assert answer["provenance"]["gpu_uuid"] == uuid
        assert answer["rows"] and all(
            r["GPUIndex"] == index and r["GPUUUID"] == uuid for r in answer["rows"]
        )
    assert "invalid_request" in error_text(refused) and UUID_B in error_text(refused)
