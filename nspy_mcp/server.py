"""The MCP server: four thin tools over nsight_core, built by `build_server`.

Each tool parses its arguments (pydantic models, so every tool has an input and an output
schema), calls nsight_core or the job queue, and returns a model. The rest lives in modules
named for it: `answers` (compact, narrowed answers with the next step), `tool_errors`
(errors an agent can fix, class first; the unknown-argument middleware), `resources` and
`prompts`. The job queue lives in the lifespan (one per connection in memory, one per
process over stdio and HTTP); the store lives with the server, so results outlive both.
"""

from __future__ import annotations

import contextlib
import inspect
import ipaddress
import logging
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult, InputRequiredResult, ToolAnnotations
from pydantic import Field

from nsight_core.errors import NsightCoreError
from nsight_core.host.catalog import MetricsValidation, warm_metric_check
from nsight_core.host.catalog import validate_metrics as catalog_validate_metrics
from nsight_core.host.probe import EnvironmentReport, probe_environment
from nsight_core.plan.config import EngineConfig
from nsight_core.processes.sandbox import protect_this_process
from nsight_core.processes.standby import MEMORY_FILE, StandbyMemory
from nsight_core.request import ProfileRequest
from nsight_core.results import JobStatus, ProfileResult
from nsight_core.store.result_store import (
    RESULT_ID_PATTERN,
    CorruptResultError,
    ResultFilter,
    ResultStore,
    Retention,
    default_store_root,
    validate_result_id,
)
from nspy_mcp.answers import (
    ReadResultsAnswer,
    listing,
    parse_time,
    result_answer,
    shape_result,
    with_next_step,
)
from nspy_mcp.cluster import DaskExecutor, parse_executor
from nspy_mcp.devices import DeviceLocks
from nspy_mcp.executors import Executor, LocalExecutor
from nspy_mcp.jobs import JobQueue, ProgressSink
from nspy_mcp.progress import ProgressUpdate
from nspy_mcp.prompts import register_prompt
from nspy_mcp.resources import register_resources
from nspy_mcp.tool_errors import agent_text, corrupt_error, reject_unknown_arguments, tool_error
from nspy_mcp.version import __version__
from nspy_mcp.wire import run_stdio

log = logging.getLogger(__name__)

INSTRUCTIONS = """\
nspy-mcp checks GPU kernel candidates against a trusted reference and profiles the ones that
pass with NVIDIA Nsight Compute, in a fresh time-limited process per job. Loop:
1. check_environment once per session: which backends work here and what to fix.
2. validate_metrics before any ncu run with non-default metrics.
3. profile_candidates with reference, candidates, inputs, configs; correctness is checked
   before timing, and a candidate that fails is not timed.
4. read_results with the result_id (it survives restarts; cancel=true stops a job). Act on
   comparisons that are Resolvable (the speedup's 95 % interval excludes 1.0): that is the
   verdict. A 'noisy' row (spread >= 2 %) is still usable: its interval is wider, so fewer
   speedups resolve; add runs to tighten it. Do not act on 'suspicious' or 'failed' rows;
   read their Reasons. A null value always comes with ErrorClass/Error.
5. Change one candidate, profile again, compare.
Never change GPU clocks, power, MIG or driver settings; report permission errors instead.
"""

READ_ONLY = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
PROFILING = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)
CANCELLING = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
"""read_results: reads, and with cancel=true stops a job this agent started; no user data is
touched, and cancelling twice is the same as once."""


@dataclass
class AppState:
    """What the lifespan yields: the store, this connection's job queue and the engine's
    settings (read once when the server was built)."""

    store: ResultStore
    jobs: JobQueue
    config: EngineConfig


def _state(ctx: Context[AppState, Any]) -> AppState:
    return ctx.request_context.lifespan_context


def _progress_sink(ctx: Context[AppState, Any]) -> ProgressSink:
    async def report(update: ProgressUpdate) -> None:
        message = update.message
        if update.eta_s is not None and update.progress < update.total:
            message = f"{message}, {update.eta_text()}"
        await ctx.report_progress(update.progress, update.total, message)

    return report


# -- tools ---------------------------------------------------------------------------------


async def check_environment(
    deep: Annotated[
        bool,
        Field(
            strict=True,
            description=(
                "Also run a real one-kernel ncu test of counter access (takes seconds). "
                "Use it when counter permission is unclear."
            ),
        ),
    ] = False,
    refresh: Annotated[
        bool,
        Field(
            strict=True,
            description="Ignore the cached probe (after installing or changing things).",
        ),
    ] = False,
    ctx: Context[AppState, Any] | None = None,
) -> EnvironmentReport:
    """Call this once per session, before profiling: what profiling can do on this machine.

    Reports GPUs (name, UUID, driver, CUDA, memory, clocks, processes using them), every ncu
    on PATH with its version (the first one is used), ncu-report and cupti-python versions
    and compatibility, whether GPU performance counters are readable (RmProfilingAdminOnly),
    which backends work here ('ncu', 'cupti', 'events') and why not, the frameworks present
    (torch, triton, cupy) and remediation text to act on. Pick the backend from this answer:
    'events' works everywhere (time only). It never changes driver or GPU settings; do not
    try to work around a permission problem, report it.
    """
    try:
        return await anyio.to_thread.run_sync(
            partial(
                probe_environment,
                deep=deep,
                refresh=refresh,
                memory_setting=_state(ctx).config.job_memory if ctx is not None else None,
            )
        )
    except NsightCoreError as err:
        raise tool_error(err) from err


async def validate_metrics(
    metrics: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=256)]],
        Field(
            min_length=1,
            max_length=256,
            description="ncu metric names, e.g. ['gpu__time_duration.sum', 'dram__throughput.avg.pct_of_peak_sustained_elapsed'].",
        ),
    ],
    chip: Annotated[
        str | None,
        Field(
            max_length=32,
            description="Chip to check against, e.g. 'gh100' or 'ga100'; default: the visible GPU's chip.",
        ),
    ] = None,
) -> MetricsValidation:
    """Check ncu metric names before profiling with them; profile_candidates refuses bad ones.

    Per name: valid, unknown, or needs-suffix (a base name such as 'dram__throughput' needs a
    roll-up and suffix, e.g. '.avg.pct_of_peak_sustained_elapsed'), with unit, type,
    description and the nearest valid names, plus the estimated replay passes (more passes,
    longer jobs). Works offline from catalogs bundled for common chips, and live from
    `ncu --query-metrics` where ncu exists. Only the 'ncu' backend takes metrics.
    """
    try:
        return await anyio.to_thread.run_sync(partial(catalog_validate_metrics, metrics, chip))
    except NsightCoreError as err:
        raise tool_error(err) from err


async def profile_candidates(request: ProfileRequest, ctx: Context[AppState, Any]) -> ProfileResult:
    """Check candidates against a trusted reference, then profile those that pass.

    Pass `request` with: `reference`, `candidates` and `inputs` as callables
    ('path/file.py:name' relative to `workdir`, 'package.module:name', or a bare name
    defined in inline `source`); give an absolute `workdir` (default: the server's current
    directory). `inputs(**config)` makes fresh arguments for each config in `configs`.
    `backend`: 'ncu' (any metric; needs ncu and counter access, see check_environment),
    'events' (time only, works on CPU too). Keep `runs` >= 3. Validate non-default
    `metrics` with validate_metrics first.

    Every job runs in a fresh, time-limited process: candidates are checked on seeded
    inputs first and a candidate that fails is not timed (see its `correctness` entry);
    then rows (AvgValue, StdDev, CI95, Trust), `comparisons` against the reference (Speedup
    with its 95 % CI, Resolvable) and `failures`. Raw per-run values are left out here:
    read_results(result_id, detail='full') has them. If the job outlasts `wait_s` (default
    60 s) the answer has status 'running' and a result_id: call read_results with it (its
    wait_s waits there). Cancelling this call kills the job. Errors you can fix (bad field,
    bad metric, missing ncu or GPU) come back as errors that say what to change, and
    nothing is queued.
    """
    state = _state(ctx)
    try:
        job = await state.jobs.submit(request)
    except NsightCoreError as err:
        raise tool_error(err) from err
    result = await state.jobs.wait(job, request.wait_s, _progress_sink(ctx), owner=True)
    return with_next_step(shape_result(result, full=False))


async def read_results(
    ctx: Context[AppState, Any],
    result_id: Annotated[
        str | None,
        Field(
            pattern=RESULT_ID_PATTERN,
            description="A result_id from profile_candidates or a listing. Omit to list past results.",
        ),
    ] = None,
    annotation: Annotated[
        str | None,
        Field(
            max_length=1024,
            description="Only this reference or candidate, spelled as in the request.",
        ),
    ] = None,
    config_id: Annotated[
        int | None, Field(ge=0, strict=True, description="Only this config (index into `configs`).")
    ] = None,
    metric: Annotated[str | None, Field(max_length=256, description="Only this metric.")] = None,
    status: Annotated[
        JobStatus | None, Field(description="Listing only: results with this status.")
    ] = None,
    since: Annotated[
        str | None,
        Field(
            max_length=64,
            description="Listing only: queued at or after this time (ISO 8601; UTC if no zone).",
        ),
    ] = None,
    until: Annotated[
        str | None,
        Field(max_length=64, description="Listing only: queued at or before this time."),
    ] = None,
    detail: Annotated[
        Literal["compact", "full"],
        Field(description="'full' adds raw per-run values (RawValues) and whole tracebacks."),
    ] = "compact",
    limit: Annotated[
        int, Field(ge=1, le=100, strict=True, description="Listing only: page size.")
    ] = 20,
    cursor: Annotated[
        str | None,
        Field(
            pattern=RESULT_ID_PATTERN,
            description="Listing only: the `next_cursor` of the previous page.",
        ),
    ] = None,
    wait_s: Annotated[
        float,
        Field(
            ge=0,
            le=3600,
            strict=True,
            description="With result_id of a queued/running job: wait up to this long for it.",
        ),
    ] = 0.0,
    cancel: Annotated[
        bool,
        Field(
            strict=True,
            description=(
                "With result_id of a queued/running job of this server: stop it (its process "
                "group is killed) and record it 'cancelled'; answers the final result."
            ),
        ),
    ] = False,
) -> ReadResultsAnswer:
    """Read stored results; they survive server restarts.

    With `result_id`: that result (status, message, rows, comparisons against the
    reference, correctness, failures, provenance and artifact paths), narrowed by
    `annotation`, `config_id` and `metric` if given. Compact by default; detail='full' adds
    raw per-run values and whole tracebacks. For a queued or running job, `wait_s` waits
    for it (with progress). Without `result_id`: a page of past results, newest first,
    filtered by annotation, config_id, metric, status and since/until; pass the answer's
    `next_cursor` as `cursor` for the next page. `cancel=true` with a `result_id` stops a
    queued or running job (its whole process group is killed) and answers its result,
    recorded as 'cancelled'.
    """
    state = _state(ctx)
    full = detail == "full"
    try:
        if result_id is None:
            if cancel:
                raise ToolError(
                    "invalid_request: cancel needs the result_id of the job to stop. To fix: "
                    "pass result_id=... (list results without cancel to find it)"
                )
            return listing(
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
    return result_answer(
        result, full=full, annotation=annotation, config_id=config_id, metric=metric
    )


async def _one_result(
    state: AppState, result_id: str, wait_s: float, ctx: Context[AppState, Any]
) -> ProfileResult:
    job = state.jobs.get(result_id)
    if job is not None:
        return await state.jobs.wait(job, wait_s, _progress_sink(ctx), owner=False)
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


# -- the server ----------------------------------------------------------------------------


class _Server(MCPServer[AppState]):
    """MCPServer whose tool errors all read as nspy-mcp's: class first, field, fix.

    The SDK prefixes every tool error with "Error executing tool <name>: " and passes
    pydantic's raw dump through for schema errors; here both become `agent_text`.
    """

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[AppState, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc, UnexpectedToolError):
                log.error("tool %r raised an unexpected exception", name, exc_info=exc.__cause__)
            tool = self._tool_manager.get_tool(name)
            schema = tool.parameters if tool is not None else None
            names = [t.name for t in self._tool_manager.list_tools()]
            raise ToolError(agent_text(name, exc, schema, names)) from exc


def _add_tool(
    server: MCPServer[AppState], fn: Any, title: str, annotations: ToolAnnotations
) -> None:
    # Dedented: the docstring's indentation would otherwise reach the agent as-is.
    server.tool(title=title, description=inspect.cleandoc(fn.__doc__), annotations=annotations)(fn)


def warm_caches(locks: DeviceLocks) -> None:
    """Fill, in the background at start, what a first request would otherwise wait for: the
    GPU slots (NVML), the environment probe (ncu's version, cupti) and the metric catalog of
    this GPU's chip. All are kept in the process; failures are the request's own to report."""
    with contextlib.suppress(Exception):
        locks.discover()
    warm_metric_check()  # a no-op when `nspy-mcp serve` began it before importing the server


def build_server(
    store: str | Path | ResultStore | None = None,
    *,
    retention: Retention | None = None,
    executor: str | None = None,
    locks: DeviceLocks | None = None,
    final_stage_backend: str | None = None,
    config: EngineConfig | None = None,
) -> MCPServer[AppState]:
    """The nspy-mcp server on the result store at `store` (default: see docs/results.md).

    `executor`: 'local' (this host's GPUs, `locks`) or 'dask://HOST:PORT' (docs/cluster.md);
    default $NSPY_MCP_EXECUTOR, else local. `final_stage_backend` replaces a staged
    request's profile-stage backend (ncu) on the local executor: for tests without ncu.
    `config`: the engine's settings; default: read once, now, from this process's environment.
    """
    config = config or EngineConfig.from_env()
    result_store = (
        store
        if isinstance(store, ResultStore)
        else ResultStore(
            store if store is not None else default_store_root(config),
            retention=retention or Retention.of_config(config),
        )
    )
    scheduler = parse_executor(executor)
    local = LocalExecutor(
        locks or DeviceLocks(),
        final_backend=final_stage_backend,
        memory=StandbyMemory(result_store.root / MEMORY_FILE),
        config=config,
    )

    @asynccontextmanager
    async def lifespan(_: MCPServer[AppState]) -> AsyncIterator[AppState]:
        threading.Thread(
            target=warm_caches, args=(local.locks,), name="nspy warm caches", daemon=True
        ).start()
        if scheduler is None:
            local.begin_prestart()  # the settings an earlier server's jobs used, started now
        async with contextlib.AsyncExitStack() as stack:
            runner: Executor = local
            if scheduler is not None:
                runner = await stack.enter_async_context(DaskExecutor.connect(scheduler))
            tg = await stack.enter_async_context(anyio.create_task_group())
            jobs = JobQueue(result_store, tg, runner)
            try:
                yield AppState(store=result_store, jobs=jobs, config=config)
            finally:
                jobs.shutdown()
                await anyio.to_thread.run_sync(local.close)

    server: MCPServer[AppState] = _Server(
        "nspy-mcp",
        title="nspy-mcp: check and profile GPU kernels",
        version=__version__,
        instructions=INSTRUCTIONS,
        lifespan=lifespan,
        log_level="WARNING",
    )
    server.middleware.append(reject_unknown_arguments(server))
    _add_tool(server, check_environment, "Check the profiling environment", READ_ONLY)
    _add_tool(server, validate_metrics, "Validate ncu metric names", READ_ONLY)
    _add_tool(server, profile_candidates, "Check and profile kernel candidates", PROFILING)
    # read_results can cancel a job (cancel=true), so it is not read-only.
    _add_tool(server, read_results, "Read stored results (or cancel a job)", CANCELLING)
    register_resources(server, result_store)
    register_prompt(server)
    return server


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(
    *, http: bool, host: str, port: int, store: str | None, executor: str | None = None
) -> int:
    """Run the server: stdio by default, streamable HTTP on a loopback address with `http`."""
    if http and not _is_loopback(host):
        # profile_candidates runs the code it is given; without authentication that must
        # not be reachable from other machines.
        sys.stderr.write(
            f"nspy-mcp: refusing to serve HTTP on {host!r}: profile_candidates runs code and "
            "the server has no authentication. Use 127.0.0.1 (and an SSH tunnel if remote).\n"
        )
        return 2
    if not protect_this_process():
        log.warning(
            "could not make the server non-dumpable: same-user candidates can read "
            "its /proc/<pid>/environ"
        )
    try:
        server = build_server(store, executor=executor)
    except ValueError as exc:  # a malformed --executor / NSPY_MCP_EXECUTOR
        sys.stderr.write(f"nspy-mcp: {exc}\n")
        return 2
    if http:
        server.run("streamable-http", host=host, port=port)
    else:
        run_stdio(server)
    return 0
