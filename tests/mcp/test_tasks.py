"""The tasks extension (SEP-2663) on profile_candidates, through the real Python MCP client.

Jobs are real (events backend, CPU). The client side is `nspy_mcp.tasks.TasksClient`, a
claim on `resultType: "task"` for the SDK's own `Client`; the raw flow (the handle, then
tasks/get and tasks/cancel) is driven through the same client's session. In memory and
over stdio; a second server on the same store answers for the first one's tasks.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.types import INVALID_PARAMS, MISSING_REQUIRED_CLIENT_CAPABILITY, CallToolResult

from nsight_core.store.result_store import RESULT_ID_PATTERN, ResultStore
from nspy_mcp.server import build_server
from nspy_mcp.tasks import (
    POLL_INTERVAL_MS,
    TASKS_EXTENSION,
    CreateTaskResult,
    GetTaskResult,
    TasksClient,
    cancel_task,
    get_task,
)
from tests.mcp.test_answer_links import many_request
from tests.mcp.test_server import _pid_alive, _read_fifo, structured

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]

SLEEPER = """
import os, time

def sleeper(n):
    with open({fifo!r}, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)
    return n
"""

TRUSTED = """
def ref(n):
    return n

def make():
    return (1,)
"""


def small_request(folder: Path) -> dict[str, Any]:
    return many_request(folder) | {"configs": [{"rows": 4, "cols": 8}]}


def sleeper_request(folder: Path, fifo: Path) -> dict[str, Any]:
    """A candidate that reports its pid through a FIFO, then sleeps until it is killed."""
    folder.mkdir(exist_ok=True)
    (folder / "trusted.py").write_text(TRUSTED)
    (folder / "sleeper.py").write_text(SLEEPER.format(fifo=str(fifo)))
    return {
        "reference": "trusted.py:ref",
        "candidates": ["sleeper.py:sleeper"],
        "inputs": "trusted.py:make",
        "workdir": str(folder),
        "backend": "events",
        "runs": 1,
        "check": {"seeds": 1},
    }


async def create_task(client: Client, request: dict[str, Any]) -> CreateTaskResult:
    handle = await client.session.call_tool(
        "profile_candidates", {"request": request}, allow_claimed=True
    )
    assert isinstance(handle, CreateTaskResult), handle
    return handle


async def until_ended(client: Client, task_id: str) -> list[GetTaskResult]:
    """Poll as the server suggests until the task ends; every answer, in order."""
    seen = [await get_task(client.session, task_id)]
    while seen[-1].status == "working":
        await anyio.sleep((seen[-1].poll_interval_ms or POLL_INTERVAL_MS) / 1000)
        seen.append(await get_task(client.session, task_id))
    return seen


async def test_a_declaring_client_gets_a_durable_task_that_ends_with_the_tool_answer(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    async with Client(build_server(store), extensions=[TasksClient()]) as client:
        assert client.server_capabilities is not None
        assert TASKS_EXTENSION in (client.server_capabilities.extensions or {})
        with anyio.fail_after(120):
            handle = await create_task(client, small_request(tmp_path / "kernels"))
            # Created before the answer: the store already holds it under the task's id.
            assert ResultStore(store).load(handle.task_id).result_id == handle.task_id
            polls = await until_ended(client, handle.task_id)
    assert handle.result_type == "task"
    assert re.fullmatch(RESULT_ID_PATTERN, handle.task_id)
    assert handle.poll_interval_ms == POLL_INTERVAL_MS <= 5000
    working = [p for p in polls if p.status == "working"]
    assert working and all(p.status_message for p in working)
    # Status is fresh at each poll: the message and the update time move on.
    assert len({p.last_updated_at for p in working}) == len(working)
    done = polls[-1]
    assert done.status == "completed" and done.result is not None
    final = CallToolResult.model_validate(done.result)
    answer = structured(final)
    assert answer["result_id"] == handle.task_id and answer["status"] == "done"
    assert answer["rows"] and answer["comparisons"]
    links = [c.uri for c in final.content if c.type == "resource_link"]
    assert f"nspy://results/{handle.task_id}" in links


async def test_the_client_extension_makes_call_tool_wait_for_the_task(tmp_path: Path) -> None:
    statuses: list[str] = []

    async def on_status(task: GetTaskResult) -> None:
        statuses.append(task.status)

    async with Client(build_server(tmp_path / "store"), extensions=[TasksClient(on_status)]) as c:
        with anyio.fail_after(120):
            result = await c.call_tool(
                "profile_candidates", {"request": small_request(tmp_path / "kernels")}
            )
    assert structured(result)["status"] == "done"
    assert statuses[0] == "working" and statuses[-1] == "completed"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_client_that_did_not_declare_it_gets_todays_answer(
    mode: str, tmp_path: Path
) -> None:
    # legacy: the extension has no 2025-11-25 wire, so even TasksClient does not declare it.
    extensions = [TasksClient()] if mode == "legacy" else []
    async with Client(build_server(tmp_path / "store"), mode=mode, extensions=extensions) as c:
        with anyio.fail_after(120):
            result = await c.call_tool(
                "profile_candidates", {"request": small_request(tmp_path / "kernels")}
            )
        answer = structured(result)
        assert answer["status"] == "done"
        if mode == "auto":
            with pytest.raises(MCPError) as refused:
                await get_task(c.session, answer["result_id"])
            assert refused.value.code == MISSING_REQUIRED_CLIENT_CAPABILITY


async def test_a_refused_request_is_a_tool_error_and_unknown_tasks_are_invalid_params(
    tmp_path: Path,
) -> None:
    async with Client(build_server(tmp_path / "store"), extensions=[TasksClient()]) as client:
        request = small_request(tmp_path / "kernels") | {"candidates": ["nowhere.py:f"]}
        refused = await client.session.call_tool(
            "profile_candidates", {"request": request}, allow_claimed=True
        )
        assert isinstance(refused, CallToolResult) and refused.is_error
        assert not list((tmp_path / "store").glob("r*"))  # nothing was queued
        for task_id in ("r20990101T000000000-00000000", "../../etc/passwd"):
            with pytest.raises(MCPError) as unknown:
                await get_task(client.session, task_id)
            assert unknown.value.code == INVALID_PARAMS


async def test_tasks_cancel_kills_the_job_process_group_within_2_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The candidate writes to a FIFO outside its workdir, which confinement would refuse.
    monkeypatch.setenv("NSPY_MCP_CONFINE", "0")
    fifo = tmp_path / "pid.fifo"
    os.mkfifo(fifo)
    async with Client(build_server(tmp_path / "store"), extensions=[TasksClient()]) as client:
        with anyio.fail_after(120):
            handle = await create_task(client, sleeper_request(tmp_path / "kernels", fifo))
            pid = int(await anyio.to_thread.run_sync(_read_fifo, fifo, abandon_on_cancel=True))
            assert _pid_alive(pid)
            asked = time.monotonic()
            await cancel_task(client.session, handle.task_id)
            while _pid_alive(pid):
                await anyio.sleep(0.02)
            took = time.monotonic() - asked
            polls = await until_ended(client, handle.task_id)
    assert took <= 2.0, f"the candidate outlived tasks/cancel by {took:.2f} s"
    assert polls[-1].status == "cancelled"
    assert "tasks/cancel" in (polls[-1].status_message or "")


async def test_cancelling_a_call_that_waits_on_its_task_cancels_the_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NSPY_MCP_CONFINE", "0")
    fifo = tmp_path / "pid.fifo"
    os.mkfifo(fifo)
    store = tmp_path / "store"
    async with Client(build_server(store), extensions=[TasksClient()]) as client:
        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                call_scope = anyio.CancelScope()

                async def call() -> None:
                    with call_scope:
                        await client.call_tool(
                            "profile_candidates",
                            {"request": sleeper_request(tmp_path / "kernels", fifo)},
                        )

                tg.start_soon(call)
                pid = int(await anyio.to_thread.run_sync(_read_fifo, fifo, abandon_on_cancel=True))
                call_scope.cancel()
            (task_id,) = [p.name for p in store.glob("r*")]
            polls = await until_ended(client, task_id)
    assert polls[-1].status == "cancelled"
    assert not _pid_alive(pid)


async def test_a_task_survives_its_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NSPY_MCP_CONFINE", "0")
    fifo = tmp_path / "pid.fifo"
    os.mkfifo(fifo)
    store = tmp_path / "store"
    with anyio.fail_after(120):
        async with Client(build_server(store), extensions=[TasksClient()]) as client:
            done = await create_task(client, small_request(tmp_path / "kernels"))
            first = (await until_ended(client, done.task_id))[-1]
            cut = await create_task(client, sleeper_request(tmp_path / "sleeper", fifo))
            await anyio.to_thread.run_sync(_read_fifo, fifo, abandon_on_cancel=True)
        # The first server is gone (its running job was stopped); a new one answers for both.
        async with Client(build_server(store), extensions=[TasksClient()]) as client:
            again = await get_task(client.session, done.task_id)
            stopped = await get_task(client.session, cut.task_id)
    assert first.status == again.status == "completed"
    assert again.result == first.result
    assert stopped.status == "cancelled" and "shut down" in (stopped.status_message or "")


async def test_tasks_over_stdio_survive_a_server_restart(tmp_path: Path) -> None:
    store = tmp_path / "store"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nspy_mcp", "serve", "--store", str(store)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    request = small_request(tmp_path / "kernels")
    with anyio.fail_after(180):
        async with Client(params, extensions=[TasksClient()]) as client:
            assert client.protocol_version == "2026-07-28"
            waited = structured(await client.call_tool("profile_candidates", {"request": request}))
            handle = await create_task(client, request)
            first = (await until_ended(client, handle.task_id))[-1]
        async with Client(params, extensions=[TasksClient()]) as client:
            again = await get_task(client.session, handle.task_id)
    assert waited["status"] == "done"
    assert first.status == again.status == "completed"
    assert again.result == first.result and again.result is not None
    answer = structured(CallToolResult.model_validate(again.result))
    assert answer["result_id"] == handle.task_id and answer["status"] == "done"
