"""The MCP tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) for profile_candidates.

Contract (server side, `TasksExtension`):

- Advertised under the server's `capabilities.extensions`. A `tools/call` of
  profile_candidates from a client that declared the extension on that request (2026-07-28
  revision; the extension has no legacy wire) is answered with a task; every other call
  gets the usual answer. The request is checked and the job registered in the store first
  (a refusal is the usual tool error, and no task), so `tasks/get` resolves before the
  answer leaves: the task id is the result id.
- A task is its stored result, so it survives the server: `tasks/get` reads this server's
  job queue for a live job and the store for any other, including those of an earlier or
  another server on the same store. queued/running is `working`, with a status message
  recomputed at each poll (state, progress, phase, time left, time so far; so it changes
  at least every `POLL_INTERVAL_MS`); done/failed is `completed`, whose `result` is the
  answer profile_candidates would have given (a failed job is a result, not a protocol
  error); cancelled is `cancelled`.
- `tasks/cancel` asks a live job to stop (its process group is killed, as
  read_results(cancel=true) does) and acknowledges at once; a job of another server process
  is left to that server. `tasks/update` is acknowledged: no task here waits for input.
- Errors: a client that did not declare the extension gets -32021; an id that is not one
  of the store's results gets -32602 ("Failed to retrieve task: ...").

`TasksClient` is the client side for the Python SDK (which has no tasks runtime): a client
extension whose claim on `resultType: "task"` polls `tasks/get` until the task ends and
returns its final `CallToolResult`, so `Client.call_tool` works unchanged; cancelling the
call sends `tasks/cancel`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, cast

import anyio
import anyio.to_thread
from mcp import MCPError
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import require_client_extension
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    EmptyResult,
    Request,
    RequestParams,
    Result,
    TextContent,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field

from nsight_core.errors import NsightCoreError
from nsight_core.results import ProfileResult, iso, utc_now
from nsight_core.store.result_store import TERMINAL, CorruptResultError
from nspy_mcp.answers import result_tool_answer, shape_result, with_next_step
from nspy_mcp.tool_server import AppState

log = logging.getLogger(__name__)

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TASK_TOOLS = frozenset({"profile_candidates"})
"""Tools a declaring client gets a task for: the ones whose jobs outlast a call."""
POLL_INTERVAL_MS = 1000
"""Suggested polling interval; a working task's status message is recomputed at each poll."""

TaskStatus = Literal["working", "input_required", "completed", "cancelled", "failed"]


# -- the wire ------------------------------------------------------------------------------


class TaskRequestParams(RequestParams):
    """Params of tasks/get and tasks/cancel."""

    task_id: str


class UpdateTaskRequestParams(TaskRequestParams):
    """Params of tasks/update."""

    input_responses: dict[str, Any] = Field(default_factory=dict)


class _TaskState(Result):
    """What every answer about a task carries: which task, where it stands, how to poll it."""

    result_type: str
    task_id: str
    status: TaskStatus
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class CreateTaskResult(_TaskState):
    """A task handle in place of a tool result (`resultType: "task"`)."""

    result_type: Literal["task"] = "task"


class GetTaskResult(_TaskState):
    """A task as tasks/get answers it; `result` once completed, `error` once failed."""

    result_type: str = "complete"
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class GetTaskRequest(Request[TaskRequestParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class CancelTaskRequest(Request[TaskRequestParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


# -- the server side -----------------------------------------------------------------------


@dataclass
class TaskSlot:
    """Set around a tools/call answered as a task: the tool names the job it registered."""

    result_id: str | None = None


_TASK: ContextVar[TaskSlot | None] = ContextVar("nspy_task", default=None)


def task_slot() -> TaskSlot | None:
    """The slot of the task this tool call answers as, or None for a plain call."""
    return _TASK.get()


def _now() -> str:
    return iso(utc_now())


def _not_found(task_id: str, why: str) -> MCPError:
    return MCPError(code=INVALID_PARAMS, message=f"Failed to retrieve task {task_id!r}: {why}")


class TasksExtension(Extension):
    """Answers a declaring client's profile_candidates call with a task (module docstring)."""

    identifier = TASKS_EXTENSION

    def methods(self) -> Sequence[MethodBinding]:
        versions = frozenset(MODERN_PROTOCOL_VERSIONS)
        return (
            MethodBinding("tasks/get", TaskRequestParams, self._get, versions),
            MethodBinding("tasks/cancel", TaskRequestParams, self._cancel, versions),
            MethodBinding("tasks/update", UpdateTaskRequestParams, self._update, versions),
        )

    async def intercept_tool_call(
        self,
        params: CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        if params.name not in TASK_TOOLS or not _declared(ctx):
            return await call_next(ctx)
        slot = TaskSlot()
        token = _TASK.set(slot)
        try:
            answer = await call_next(ctx)
        finally:
            _TASK.reset(token)
        if slot.result_id is None:  # refused before anything was queued: the tool error
            return answer
        task = await self._task(_host(ctx), slot.result_id)
        fields = {k: v for k, v in task.items() if k not in ("result", "error", "resultType")}
        return {"resultType": "task", **fields}

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: Any) -> HandlerResult:
        require_client_extension(ctx, TASKS_EXTENSION)
        return await self._task(_host(ctx), cast(TaskRequestParams, params).task_id)

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: Any) -> HandlerResult:
        require_client_extension(ctx, TASKS_EXTENSION)
        host, task_id = _host(ctx), cast(TaskRequestParams, params).task_id
        job = host.jobs.get(task_id)
        if job is not None:
            host.jobs.cancel(job, "cancelled by tasks/cancel")
        else:
            await self._stored(host, task_id)  # an unknown id is an error; an ended one not
        return EmptyResult(result_type="complete")

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: Any) -> HandlerResult:
        require_client_extension(ctx, TASKS_EXTENSION)
        await self._task(_host(ctx), cast(UpdateTaskRequestParams, params).task_id)
        return EmptyResult(result_type="complete")

    async def _stored(self, host: AppState, task_id: str) -> ProfileResult:
        try:
            return await anyio.to_thread.run_sync(host.store.load, task_id)
        except NsightCoreError as err:
            raise _not_found(task_id, err.message) from err
        except CorruptResultError as err:
            raise MCPError(code=INTERNAL_ERROR, message=str(err)) from err

    async def _task(self, host: AppState, task_id: str) -> dict[str, Any]:
        """The task as tasks/get answers it (camelCase wire fields)."""
        job = host.jobs.get(task_id)
        stored = await self._stored(host, task_id)
        retention = host.store.retention.max_age_days
        task: dict[str, Any] = {
            "taskId": task_id,
            "createdAt": stored.created_at,
            "ttlMs": None if retention is None else round(retention * 86_400_000),
            "pollIntervalMs": POLL_INTERVAL_MS,
        }
        if job is not None and job.result is None:  # live in this server
            latest = job.tracker.latest
            state = f"running on {job.where}" if job.started else "queued"
            so_far = time.monotonic() - job.submitted
            message = (
                f"{state}: {latest.progress:.0f} %, {latest.message}; {latest.eta_text()}; "
                f"{so_far:.0f} s so far"
            )
            return task | {"status": "working", "statusMessage": message, "lastUpdatedAt": _now()}
        if job is not None:
            stored = job.result or stored
        if stored.status not in TERMINAL:  # another server process runs it
            return task | {
                "status": "working",
                "statusMessage": stored.message,
                "lastUpdatedAt": _now(),
            }
        task |= {"statusMessage": stored.message, "lastUpdatedAt": stored.finished_at or _now()}
        if stored.status == "cancelled":
            return task | {"status": "cancelled"}
        answer = result_tool_answer(host.store, with_next_step(shape_result(stored, full=False)))
        result = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
        return task | {"status": "completed", "result": result}


def _declared(ctx: ServerRequestContext[Any, Any]) -> bool:
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    try:
        require_client_extension(ctx, TASKS_EXTENSION)
    except MCPError:
        return False
    return True


def _host(ctx: ServerRequestContext[Any, Any]) -> AppState:
    return cast(AppState, ctx.lifespan_context)


# -- the client side -----------------------------------------------------------------------


async def get_task(session: ClientSession, task_id: str) -> GetTaskResult:
    """One tasks/get."""
    return await session.send_request(
        GetTaskRequest(params=TaskRequestParams(task_id=task_id)), GetTaskResult
    )


async def cancel_task(session: ClientSession, task_id: str) -> None:
    """One tasks/cancel (acknowledged at once; the task ends `cancelled` soon after)."""
    await session.send_request(
        CancelTaskRequest(params=TaskRequestParams(task_id=task_id)), EmptyResult
    )


StatusCallback = Callable[[GetTaskResult], Awaitable[None]]


class TasksClient(ClientExtension):
    """Declares the tasks extension and resolves task answers by polling tasks/get.

    `Client(server, extensions=[TasksClient()])`: `call_tool` then returns the task's final
    result, as if the call had waited; `on_status` sees every poll's task (status message).
    """

    identifier = TASKS_EXTENSION

    def __init__(self, on_status: StatusCallback | None = None, max_poll_s: float = 5.0):
        self._on_status = on_status
        self._max_poll_s = max_poll_s

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (ResultClaim(result_type="task", model=CreateTaskResult, resolve=self.resolve),)

    async def resolve(self, created: CreateTaskResult, ctx: ClaimContext) -> CallToolResult:
        """Poll until the task ends; a cancelled call cancels the task."""
        interval = created.poll_interval_ms or POLL_INTERVAL_MS
        try:
            while True:
                task = await get_task(ctx.session, created.task_id)
                if self._on_status is not None:
                    await self._on_status(task)
                if task.status == "completed" and task.result is not None:
                    return CallToolResult.model_validate(task.result)
                if task.status == "failed":
                    error = task.error or {}
                    raise MCPError(
                        code=int(error.get("code", INTERNAL_ERROR)),
                        message=str(error.get("message", task.status_message)),
                    )
                if task.status == "cancelled":
                    text = f"task {task.task_id} was cancelled: {task.status_message}"
                    return CallToolResult(
                        content=[TextContent(type="text", text=text)], is_error=True
                    )
                interval = task.poll_interval_ms or interval
                await anyio.sleep(min(interval / 1000, self._max_poll_s))
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await cancel_task(ctx.session, created.task_id)
            raise
