"""The MCP server: four thin tools over nsight_core, built by `build_server`.

Each tool parses its arguments (pydantic models, so every tool has an input and an output
schema), calls nsight_core or the job queue, and returns a model. The rest lives in modules
named for it: `tool_server` (the state tools read, the MCPServer they run on), `answers`
(compact, narrowed answers with the next step), `links` (where a result's full data is),
`tool_errors` (errors an agent can fix, class first; the unknown-argument middleware),
`tasks` (the MCP tasks extension), `skills` (the loop as an Agent Skill, the skills
extension), `resources` and `prompts`. The job queue lives in the
lifespan (one per connection in memory, one per process over stdio and HTTP); the store
lives with the server, so results outlive both.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field

from nsight_core.errors import NsightCoreError
from nsight_core.host.catalog import MetricsValidation, warm_metric_check
from nsight_core.host.catalog import validate_metrics as catalog_validate_metrics
from nsight_core.host.probe import EnvironmentReport, probe_environment
from nsight_core.plan.config import EngineConfig
from nsight_core.processes.sandbox import protect_this_process
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
from nspy_mcp.cluster import DaskExecutor
from nspy_mcp.devices import DeviceLocks
from nspy_mcp.executors import Executor, LocalExecutor, parse_executor
from nspy_mcp.jobs import JobQueue
from nspy_mcp.links import result_links
from nspy_mcp.prompts import register_prompt
from nspy_mcp.resources import register_resources
from nspy_mcp.schemas import OutputPolicy
from nspy_mcp.skills import SkillsExtension
from nspy_mcp.tasks import TasksExtension, task_slot
from nspy_mcp.tool_errors import corrupt_error, reject_unknown_arguments, tool_error
from nspy_mcp.tool_server import AppState, ToolServer, progress_sink, state_of
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
   comparisons that are Resolvable (the speedup's 95 % interval excludes 1.0; on a CPU,
   by more than the runs' noise): that is the verdict. A 'noisy' row (spread >= 2 % or
   unsteady GPU clock) is still usable: its interval is wider, so fewer speedups resolve;
   add runs to tighten it. Do not act on 'suspicious' or 'failed' rows;
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

RESULT_OUTPUT = OutputPolicy(
    deep=frozenset(
        {
            "Row",
            "Comparison",
            "Correctness",
            "Failure",
            "ErrorClass",
            "Provenance",
            "Diagnosis",
            "RuleFinding",
        }
    ),
    documented=frozenset(
        {
            "Row.Unit",
            "Row.RequestedRuns",
            "Row.StableMeasurement",
            "Row.Evidence",
            "Row.Normalized",
            "Row.Trust",
            "Row.Reasons",
            "Row.RawValues",
            "Comparison.Ratio",
            "Comparison.Speedup",
            "Comparison.Speedup_CI95_Lower",
            "Comparison.Resolvable",
            "Comparison.NumPairs",
        }
    ),
)
"""profile_candidates' answer: what an agent acts on (rows, comparisons, correctness,
failures) and what it reads next (provenance, diagnoses) validated to the leaves, the fields
whose meaning a name does not carry described; stages, best_so_far and cross-checks checked
by type. docs/rows.md, docs/results.md and docs/diagnose.md document every field."""
ENV_OUTPUT = OutputPolicy(
    deep=frozenset(EnvironmentReport.model_json_schema()["$defs"]) - {"CanaryCheck"}
)
"""check_environment's answer: every section validated to the leaves but the deep check's
canaries, checked by type (docs/environment.md documents their fields): they cost every
session's tools/list nothing but the field itself."""
READ_OUTPUT = OutputPolicy(deep=frozenset({"ProfileResult", "ResultSummary"}))
"""read_results' answer: the result's own fields and the listing's summaries; the parts of a
result are described once, in profile_candidates' output schema."""


# -- tools ---------------------------------------------------------------------------------


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

    GPUs (driver, clocks, processes using them), the ncu used, whether GPU counters are
    readable, which backends work here ('ncu', 'cupti', 'events') and why not, frameworks,
    and `remediation` steps. Pick the backend from it; 'events' works everywhere (time
    only). It never changes driver or GPU settings: report a permission problem instead.
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
    roll-up and suffix, e.g. '.avg.pct_of_peak_sustained_elapsed'), with unit, description
    and the nearest valid names, plus estimated replay passes. Works offline from bundled
    catalogs. Only the 'ncu' backend takes metrics.
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

    Each job runs in a fresh, time-limited process. Candidates are checked on seeded inputs
    first; one that fails is not timed (`correctness` says why). The answer has `rows`
    (AvgValue, CI95, Trust), `comparisons` with the reference (Speedup, its 95 % CI,
    Resolvable) and `failures`. A job that outlasts `wait_s` answers 'running' with a
    result_id for read_results. Cancelling this call kills the job. Errors you can fix say
    what to change, and nothing is queued. Details: docs/tools.md.
    """
    state = state_of(ctx)
    try:
        job = await state.jobs.submit(request)
    except NsightCoreError as err:
        raise tool_error(err) from err
    if (as_task := task_slot()) is not None:  # answered as a task (nspy_mcp/tasks.py)
        as_task.result_id = job.result_id
        return result_tool_answer(state.store, state.jobs.snapshot(job))
    result = await state.jobs.wait(job, request.wait_s, progress_sink(ctx), owner=True)
    return result_tool_answer(state.store, with_next_step(shape_result(result, full=False)))


async def read_results(
    ctx: Context[AppState, Any],
    result_id: Annotated[
        str | None,
        Field(
            pattern=RESULT_ID_PATTERN,
            description="Omit to list past results.",
        ),
    ] = None,
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
    metric: Annotated[str | None, Field(max_length=256, description="Only this metric.")] = None,
    status: Annotated[JobStatus | None, Field(description="Listing: only this status.")] = None,
    since: Annotated[
        str | None,
        Field(
            max_length=64,
            description="Listing: queued at or after (ISO 8601; UTC if no zone).",
        ),
    ] = None,
    until: Annotated[
        str | None,
        Field(max_length=64, description="Listing: queued at or before."),
    ] = None,
    detail: Annotated[
        Literal["compact", "full"],
        Field(description="'full' adds RawValues and whole tracebacks."),
    ] = "compact",
    limit: Annotated[int, Field(ge=1, le=100, strict=True, description="Listing: page size.")] = 20,
    cursor: Annotated[
        str | None,
        Field(
            pattern=RESULT_ID_PATTERN,
            description="Listing: the last page's `next_cursor`.",
        ),
    ] = None,
    wait_s: Annotated[
        float,
        Field(
            ge=0,
            le=3600,
            strict=True,
            description="Wait up to this long for a queued/running job.",
        ),
    ] = 0.0,
    cancel: Annotated[
        bool,
        Field(
            strict=True,
            description="Stop this server's queued/running job; answers it, 'cancelled'.",
        ),
    ] = False,
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


# -- the server ----------------------------------------------------------------------------


def warm_caches(locks: DeviceLocks, config: EngineConfig) -> None:
    """Fill, in the background at start, what a first request would otherwise wait for: the
    GPU slots (NVML), the environment probe (ncu's version, cupti) and the metric catalog of
    this GPU's chip. All are kept in the process; failures are the request's own to report."""
    with contextlib.suppress(Exception):
        locks.discover()
    warm_metric_check(config)  # a no-op when `nspy-mcp serve` began it before importing the server


def build_server(
    store: str | Path | ResultStore | None = None,
    *,
    retention: Retention | None = None,
    executor: str | None = None,
    locks: DeviceLocks | None = None,
    config: EngineConfig | None = None,
    local: LocalExecutor | None = None,
) -> MCPServer[AppState]:
    """The nspy-mcp server on the result store at `store` (default: see docs/results.md).

    `executor`: 'local' (this host's GPUs, `locks`) or 'dask://HOST:PORT' (docs/cluster.md);
    default $NSPY_MCP_EXECUTOR, else local. `config`: the engine's settings; default: read
    once, now, from this process's environment (tests on hosts without ncu set its
    `profile_backend`). `local`: this host's executor, made for this store by
    `executors.start_local` (its settings and locks are then the server's).
    """
    config = config or (local.config if local is not None else EngineConfig.from_env())
    result_store = (
        store
        if isinstance(store, ResultStore)
        else ResultStore(
            store if store is not None else default_store_root(config),
            retention=retention or Retention.of_config(config),
        )
    )
    scheduler = parse_executor(executor if executor is not None else config.executor)
    local = local or LocalExecutor.for_store(result_store.root, config, locks)

    @asynccontextmanager
    async def lifespan(_: MCPServer[AppState]) -> AsyncIterator[AppState]:
        threading.Thread(
            target=warm_caches, args=(local.locks, config), name="nspy warm caches", daemon=True
        ).start()
        if scheduler is None:
            local.begin_prestart()  # the settings an earlier server's jobs used, started now
        async with contextlib.AsyncExitStack() as stack:
            runner: Executor = local
            if scheduler is not None:
                runner = await stack.enter_async_context(DaskExecutor.connect(scheduler))
            tg = await stack.enter_async_context(anyio.create_task_group())
            jobs = JobQueue(result_store, tg, runner, config)
            try:
                yield AppState(store=result_store, jobs=jobs, config=config)
            finally:
                jobs.shutdown()
                await anyio.to_thread.run_sync(local.close)

    server = ToolServer(
        "nspy-mcp",
        title="nspy-mcp: check and profile GPU kernels",
        version=__version__,
        instructions=INSTRUCTIONS,
        lifespan=lifespan,
        log_level="WARNING",
        extensions=[TasksExtension(), SkillsExtension()],
    )
    server.middleware.append(reject_unknown_arguments(server))
    server.register_tool(
        check_environment, "Check the profiling environment", READ_ONLY, ENV_OUTPUT
    )
    server.register_tool(validate_metrics, "Validate ncu metric names", READ_ONLY)
    server.register_tool(
        profile_candidates,
        "Check and profile kernel candidates",
        PROFILING,
        RESULT_OUTPUT,
    )
    # read_results can cancel a job (cancel=true), so it is not read-only.
    server.register_tool(
        read_results, "Read stored results (or cancel a job)", CANCELLING, READ_OUTPUT
    )
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
    *,
    http: bool,
    host: str,
    port: int,
    store: str | None,
    executor: str | None = None,
    local: LocalExecutor | None = None,
    config: EngineConfig | None = None,
) -> int:
    """Run the server: stdio by default, streamable HTTP on a loopback address with `http`.
    `local`: its executor, already starting its judges (`executors.start_local`); `config`:
    the settings its command read (default: `build_server`'s)."""
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
        server = build_server(store, executor=executor, local=local, config=config)
    except ValueError as exc:  # a malformed --executor / NSPY_MCP_EXECUTOR
        sys.stderr.write(f"nspy-mcp: {exc}\n")
        return 2
    if http:
        # stdout is free under HTTP, but a URL a user copies belongs with the other notices.
        url_host = f"[{host}]" if ":" in host else host
        sys.stderr.write(
            f"nspy-mcp: serving MCP (streamable HTTP) at http://{url_host}:{port}/mcp\n"
        )
        server.run("streamable-http", host=host, port=port, streamable_http_path="/mcp")
    else:
        run_stdio(server)
    return 0
