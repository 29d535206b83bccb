"""The four tools' bodies, apart from the server that registers them (server.py).

Each parses its arguments (pydantic models, so every tool has an input and an output
schema), calls nsight_core or the job queue, and returns a model; MCPServer leaves them
unchanged, so they stay directly callable.
"""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any, Literal

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult
from pydantic import Field

from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.host.catalog import MetricsValidation
from nsight_core.host.catalog import validate_metrics as catalog_validate_metrics
from nsight_core.host.probe import EnvironmentReport, probe_environment
from nsight_core.plan.config import EngineConfig
from nsight_core.request import ProfileRequest
from nsight_core.results import JobStatus, ProfileResult
from nsight_core.store.result_store import (
    RESULT_ID_PATTERN,
    CorruptResultError,
    ResultFilter,
    validate_result_id,
)
from nspy_mcp.answers import (
    ReadResultsAnswer,
    fit_listing,
    fit_validation,
    listing,
    parse_time,
    result_answer,
    result_tool_answer,
    shape_result,
    tool_answer,
    with_next_step,
)
from nspy_mcp.canaries import with_canaries
from nspy_mcp.links import result_links
from nspy_mcp.tasks import task_slot
from nspy_mcp.tool_errors import corrupt_error, tool_error
from nspy_mcp.tool_server import AppState, progress_sink, state_of


async def check_environment(
    deep: Annotated[
        bool,
        Field(
            strict=True,
            description="Also run one kernel under ncu and canary hacks per backend (seconds).",
        ),
    ] = False,
    refresh: Annotated[
        bool,
        Field(
            strict=True,
            description="Ignore the cached probe.",
        ),
    ] = False,
    ctx: Context[AppState, Any] | None = None,
) -> Annotated[CallToolResult, EnvironmentReport]:
    """Call once per session, before profiling: what profiling can do on this machine.

    Which backends work here ('ncu', 'cupti', 'events') and why not, the GPUs and what
    runs on them, the ncu used, counter access, and `remediation` steps. Pick the backend
    from it; 'events' works everywhere (time only). It never changes driver or GPU
    settings: report a permission problem instead.
    """
    served = state_of(ctx).config if ctx is not None else None
    config = served or EngineConfig.from_env()  # a library call is an edge too
    try:
        report = await anyio.to_thread.run_sync(
            partial(
                probe_environment,
                config,
                deep=deep,
                refresh=refresh,
                memory_setting=served.job_memory if served is not None else None,
            )
        )
        if deep:  # known hacks through the real pipeline, one job per backend
            report = await anyio.to_thread.run_sync(with_canaries, report, config)
    except NsightCoreError as err:
        raise tool_error(err) from err
    return tool_answer(report)


async def validate_metrics(
    metrics: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=256)]],
        Field(
            min_length=1,
            max_length=256,
            description="e.g. ['gpu__time_duration.sum'].",
        ),
    ],
    chip: Annotated[
        str | None,
        Field(
            max_length=32,
            description="e.g. 'gh100'; default: the visible GPU's.",
        ),
    ] = None,
    ctx: Context[AppState, Any] | None = None,
) -> Annotated[CallToolResult, MetricsValidation]:
    """Check ncu metric names before profiling with them; profile_candidates refuses bad ones.

    Per name: valid, unknown or needs_suffix (a base name such as 'dram__throughput' needs a
    roll-up and suffix, e.g. '.avg.pct_of_peak_sustained_elapsed'), with the nearest valid
    names. Works offline from bundled catalogs. Only the 'ncu' backend takes metrics.
    """
    config = state_of(ctx).config if ctx is not None else EngineConfig.from_env()
    try:
        checked = await anyio.to_thread.run_sync(
            partial(catalog_validate_metrics, metrics, chip, config=config)
        )
    except NsightCoreError as err:
        raise tool_error(err) from err
    return tool_answer(fit_validation(checked))


async def profile_candidates(
    request: ProfileRequest, ctx: Context[AppState, Any]
) -> Annotated[CallToolResult, ProfileResult]:
    """Check candidates against a trusted reference, then profile those that pass.

    `request` names `reference`, `candidates` and `inputs` as callables ('file.py:name'
    under an absolute `workdir`, 'package.module:name', or a name in inline `source`);
    `inputs(**config)` makes fresh arguments for each of `configs`. Keep `runs` >= 3.

    Candidates are checked on seeded inputs first; one that fails is not timed
    (`correctness` says why). The answer has `rows` (AvgValue, CI95, Trust), `comparisons`
    with the reference (Speedup, its 95 % CI, Resolvable) and `failures`. A job that
    outlasts `wait_s` answers 'running' with a result_id for read_results. Cancelling this
    call kills the job. A refused request says what to change; nothing was queued.
    """
    state = state_of(ctx)
    if request.fallback is not None:  # resolution's own record: a caller's would mislabel rows
        raise tool_error(
            NsightCoreError(
                ErrorClass.INVALID_REQUEST,
                "`fallback` is the server's record of a backend this host could not run; "
                "a request does not set it",
                "drop `fallback` and name the backend (and metrics) to run",
            )
        )
    try:
        job = await state.jobs.submit(request)
    except NsightCoreError as err:
        raise tool_error(err) from err
    if (as_task := task_slot()) is not None:  # answered as a task (nspy_mcp/tasks.py)
        as_task.result_id = job.result_id
        return result_tool_answer(state.store, state.jobs.snapshot(job))
    result = await state.jobs.wait(job, request.wait_s, progress_sink(ctx), owner=True)
    return result_tool_answer(state.store, with_next_step(shape_result(result, full=False)))


# The tool's description documents each argument it names; a field's own description only
# says what the description does not (tools/list carries both in every session).
async def read_results(
    ctx: Context[AppState, Any],
    result_id: Annotated[str | None, Field(pattern=RESULT_ID_PATTERN)] = None,
    annotation: Annotated[
        str | None,
        Field(
            max_length=1024,
            description="Only this reference or candidate.",
        ),
    ] = None,
    config_id: Annotated[
        int | None, Field(ge=0, strict=True, description="Only this config (index into `configs`).")
    ] = None,
    metric: Annotated[str | None, Field(max_length=256)] = None,
    status: JobStatus | None = None,
    since: Annotated[
        str | None,
        Field(max_length=64, description="Queued at or after (ISO 8601; UTC if no zone)."),
    ] = None,
    until: Annotated[str | None, Field(max_length=64)] = None,
    detail: Annotated[
        Literal["compact", "full"],
        Field(description="'full' adds RawValues and whole tracebacks."),
    ] = "compact",
    limit: Annotated[int, Field(ge=1, le=100, strict=True, description="Listing: page size.")] = 20,
    cursor: Annotated[str | None, Field(pattern=RESULT_ID_PATTERN)] = None,
    wait_s: Annotated[float, Field(ge=0, le=3600, strict=True)] = 0.0,
    cancel: Annotated[bool, Field(strict=True)] = False,
) -> Annotated[CallToolResult, ReadResultsAnswer]:
    """Read a stored result, follow or cancel a job, or list past results (they survive restarts).

    With `result_id`: that result, narrowed by `annotation`, `config_id` and `metric`;
    compact unless detail='full'. `wait_s` waits for a queued or running job (with
    progress); `cancel=true` kills its process group and answers it, 'cancelled'. Without
    `result_id`: a page of results, newest first, filtered by annotation, config_id,
    metric, status and since/until; pass `next_cursor` as `cursor` for the next page.
    """
    state = state_of(ctx)
    full = detail == "full"
    try:
        if result_id is None:
            if cancel:
                raise ToolError(
                    "invalid_request: cancel needs the result_id of the job to stop. To fix: "
                    "pass result_id=... (list results without cancel to find it)"
                )
            page = listing(
                state.store,
                ResultFilter(
                    status=status,
                    annotation=annotation,
                    config_id=config_id,
                    metric=metric,
                    since=parse_time("since", since),
                    until=parse_time("until", until),
                ),
                limit=limit,
                cursor=cursor,
            )
            return tool_answer(fit_listing(page))
        listing_only = {
            "status": status,
            "since": since,
            "until": until,
            "cursor": cursor,
        }
        given = sorted(k for k, v in listing_only.items() if v is not None)
        if given:
            raise ToolError(
                f"invalid_request: {given} apply to listings only; drop them, or drop result_id "
                "to list results"
            )
        checked_id = validate_result_id(result_id)
        if cancel:
            result = await _cancel(state, checked_id)
        else:
            result = await _one_result(state, checked_id, wait_s, ctx)
    except NsightCoreError as err:
        raise tool_error(err) from err
    except CorruptResultError as err:
        raise corrupt_error(err) from err
    answer = result_answer(
        result, full=full, annotation=annotation, config_id=config_id, metric=metric
    )
    return tool_answer(answer, result_links(state.store, result))


async def _one_result(
    state: AppState, result_id: str, wait_s: float, ctx: Context[AppState, Any]
) -> ProfileResult:
    job = state.jobs.get(result_id)
    if job is not None:
        return await state.jobs.wait(job, wait_s, progress_sink(ctx), owner=False)
    return await anyio.to_thread.run_sync(state.store.load, result_id)


async def _cancel(state: AppState, result_id: str) -> ProfileResult:
    job = state.jobs.get(result_id)
    if job is not None:
        return await state.jobs.cancel_and_wait(job, "cancelled by read_results(cancel=true)")
    result = await anyio.to_thread.run_sync(state.store.load, result_id)
    if result.status in ("queued", "running"):
        raise ToolError(
            f"invalid_request: job {result_id} is {result.status} in another nspy-mcp server "
            "process; only that server can cancel it. To fix: cancel it through that server, "
            "or stop that server (its jobs are then recorded as cancelled)"
        )
    message = f"nothing to cancel: it had already ended ({result.status}). {result.message}"
    return result.model_copy(update={"message": message})
