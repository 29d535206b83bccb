"""The MCP server: four thin tools over nsight_core, plus result resources and a prompt.

Each tool parses its arguments (pydantic models, so every tool has an input and an output
schema), calls nsight_core or the job queue, and returns a model. Errors an agent can fix
come back as `ToolError`s whose text starts with the stable error class and says what to
change. Unknown arguments are refused by a middleware, since the SDK would drop them.
The job queue lives in the lifespan (one per connection in memory, one per process over
stdio and HTTP); the store lives with the server, so results outlive both.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import logging
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
import anyio.to_thread
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

from nsight_core.catalog import MetricsValidation
from nsight_core.catalog import validate_metrics as catalog_validate_metrics
from nsight_core.errors import NsightCoreError
from nsight_core.probe import EnvironmentReport, probe_environment
from nsight_core.request import ProfileRequest
from nsight_core.results import Failure, JobStatus, ProfileResult
from nsight_core.store import (
    RESULT_ID_PATTERN,
    CorruptResultError,
    ResultFilter,
    ResultStore,
    ResultSummary,
    Retention,
    validate_result_id,
)
from nspy_mcp import __version__
from nspy_mcp.jobs import DeviceLocks, JobQueue, ProgressSink
from nspy_mcp.progress import ProgressUpdate

log = logging.getLogger(__name__)

COMPACT_TRACEBACK_LINES = 12
"""Traceback lines kept in compact answers: the frames nearest the error, where the cause
usually is; detail='full' returns all of them."""

INSTRUCTIONS = """\
nspy-mcp checks GPU kernel candidates against a trusted reference and profiles the ones that
pass with NVIDIA Nsight Compute, in a fresh time-limited process per job. Loop:
1. check_environment once per session: which backends work here and what to fix.
2. validate_metrics before any ncu run with non-default metrics.
3. profile_candidates with reference, candidates, inputs, configs; correctness is checked
   before timing, and a candidate that fails is not timed.
4. read_results with the result_id (it survives restarts); act only on rows with Trust 'ok'
   and on comparisons that are Resolvable; a null value always comes with ErrorClass/Error.
5. Change one candidate, profile again, compare.
Never change GPU clocks, power, MIG or driver settings; report permission errors instead.
"""

READ_ONLY = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
PROFILING = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)


@dataclass
class AppState:
    """What the lifespan yields: the store and this connection's job queue."""

    store: ResultStore
    jobs: JobQueue


class ReadResultsAnswer(BaseModel):
    """A stored result (with result_id) or a page of past results (without)."""

    model_config = ConfigDict(extra="forbid")

    result: ProfileResult | None = Field(
        None,
        description=(
            "The result asked for by result_id; rows, comparisons, correctness and failures "
            "narrowed by annotation/config_id/metric. Raw per-run values only with detail='full'."
        ),
    )
    results: list[ResultSummary] = Field(
        default_factory=list, description="Past results, newest first (when no result_id)."
    )
    total: int | None = Field(None, description="How many stored results match the filters.")
    next_cursor: str | None = Field(
        None, description="Pass this as `cursor` to get the next page; null on the last page."
    )
    message: str = Field(description="What this answer holds and what to call next.")


# -- errors --------------------------------------------------------------------------------


def tool_error(err: NsightCoreError) -> ToolError:
    """An engine error as the agent reads it: class first, then what to change."""
    text = f"{err.error_class.value}: {err.message}"
    if err.hint:
        text += f". To fix: {err.hint}"
    return ToolError(text)


def corrupt_error(err: CorruptResultError) -> ToolError:
    return ToolError(
        f"{err}. This stored result cannot be read back; run the job again "
        f"(the directory {err.path.parent} is left for inspection)"
    )


def _state(ctx: Context[AppState, Any]) -> AppState:
    return ctx.request_context.lifespan_context


def _progress_sink(ctx: Context[AppState, Any]) -> ProgressSink:
    async def report(update: ProgressUpdate) -> None:
        message = update.message
        if update.eta_s is not None and update.progress < update.total:
            message = f"{message}, {update.eta_text()}"
        await ctx.report_progress(update.progress, update.total, message)

    return report


# -- compact answers -----------------------------------------------------------------------


def _trim_traceback(tb: str) -> str:
    lines = tb.rstrip("\n").splitlines()
    if len(lines) <= COMPACT_TRACEBACK_LINES:
        return tb
    cut = len(lines) - COMPACT_TRACEBACK_LINES
    kept = "\n".join(lines[-COMPACT_TRACEBACK_LINES:])
    return f"[{cut} earlier traceback lines cut; detail='full' has them]\n{kept}"


def shape_result(
    result: ProfileResult,
    *,
    full: bool,
    annotation: str | None = None,
    config_id: int | None = None,
    metric: str | None = None,
) -> ProfileResult:
    """Narrow a result to the filters; compact drops raw per-run values and long tracebacks."""

    def keep(ann: str | None, cid: int | None, met: str | None = None) -> bool:
        return (
            (annotation is None or ann is None or ann == annotation)
            and (config_id is None or cid is None or cid == config_id)
            and (metric is None or met is None or met == metric)
        )

    rows = [r for r in result.rows if keep(r.Annotation, r.ConfigId, r.Metric)]
    comparisons = [
        c
        for c in result.comparisons
        if keep(c.Annotation, c.ConfigId, c.Metric) or keep(c.Baseline, c.ConfigId, c.Metric)
    ]
    correctness = [c for c in result.correctness if keep(c.Annotation, c.ConfigId)]
    failures = [f for f in result.failures if keep(f.Annotation, f.ConfigId)]
    error = result.error
    if not full:
        rows = [r.model_copy(update={"RawValues": []}) for r in rows]
        failures = [_compact_failure(f) for f in failures]
        error = _compact_failure(error) if error is not None else None
    return result.model_copy(
        update={
            "rows": rows,
            "comparisons": comparisons,
            "correctness": correctness,
            "failures": failures,
            "error": error,
        }
    )


def _compact_failure(f: Failure) -> Failure:
    return f.model_copy(update={"Traceback": _trim_traceback(f.Traceback)})


def _with_next_step(result: ProfileResult) -> ProfileResult:
    if result.status in ("queued", "running") or not result.rows:
        return result
    hint = f" Raw per-run values: read_results(result_id='{result.result_id}', detail='full')."
    return result.model_copy(update={"message": (result.message or result.status) + hint})


# -- tools ---------------------------------------------------------------------------------


async def check_environment(
    deep: Annotated[
        bool,
        Field(
            description=(
                "Also run a real one-kernel ncu test of counter access (takes seconds). "
                "Use it when counter permission is unclear."
            )
        ),
    ] = False,
    refresh: Annotated[
        bool, Field(description="Ignore the cached probe (after installing or changing things).")
    ] = False,
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
            partial(probe_environment, deep=deep, refresh=refresh)
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
    return _with_next_step(shape_result(result, full=False))


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
        int | None, Field(ge=0, description="Only this config (index into `configs`).")
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
    limit: Annotated[int, Field(ge=1, le=100, description="Listing only: page size.")] = 20,
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
            description="With result_id of a queued/running job: wait up to this long for it.",
        ),
    ] = 0.0,
) -> ReadResultsAnswer:
    """Read stored results; they survive server restarts.

    With `result_id`: that result (status, message, rows, comparisons against the
    reference, correctness, failures, provenance and artifact paths), narrowed by
    `annotation`, `config_id` and `metric` if given. Compact by default; detail='full' adds
    raw per-run values and whole tracebacks. For a queued or running job, `wait_s` waits
    for it (with progress). Without `result_id`: a page of past results, newest first,
    filtered by annotation, config_id, metric, status and since/until; pass the answer's
    `next_cursor` as `cursor` for the next page.
    """
    state = _state(ctx)
    full = detail == "full"
    try:
        if result_id is None:
            return _listing(
                state.store,
                ResultFilter(
                    status=status,
                    annotation=annotation,
                    config_id=config_id,
                    metric=metric,
                    since=_parse_time("since", since),
                    until=_parse_time("until", until),
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
        result = await _one_result(state, validate_result_id(result_id), wait_s, ctx)
    except NsightCoreError as err:
        raise tool_error(err) from err
    except CorruptResultError as err:
        raise corrupt_error(err) from err
    shaped = shape_result(
        result, full=full, annotation=annotation, config_id=config_id, metric=metric
    )
    narrowed = [
        f"{k}={v!r}"
        for k, v in (("annotation", annotation), ("config_id", config_id), ("metric", metric))
        if v is not None
    ]
    message = f"result {result.result_id} is {result.status}: {result.message}"
    if result.rows:
        message += f" Showing {len(shaped.rows)} of {len(result.rows)} rows"
        message += f" ({', '.join(narrowed)})." if narrowed else "."
        if not full:
            message += " detail='full' adds raw per-run values."
    return ReadResultsAnswer(result=shaped, message=message)


async def _one_result(
    state: AppState, result_id: str, wait_s: float, ctx: Context[AppState, Any]
) -> ProfileResult:
    job = state.jobs.get(result_id)
    if job is not None:
        return await state.jobs.wait(job, wait_s, _progress_sink(ctx), owner=False)
    return await anyio.to_thread.run_sync(state.store.load, result_id)


def _listing(
    store: ResultStore, filt: ResultFilter, *, limit: int, cursor: str | None
) -> ReadResultsAnswer:
    page = store.query(filt, limit=limit, cursor=cursor)
    if page.next_cursor is not None:
        more = f"call read_results with the same filters and cursor='{page.next_cursor}' for the next page"
    else:
        more = "this is the last page"
    message = (
        f"{len(page.summaries)} of {page.total} matching result(s), newest first; {more}. "
        "Read one with read_results(result_id=...)."
    )
    return ReadResultsAnswer(
        results=page.summaries, total=page.total, next_cursor=page.next_cursor, message=message
    )


def _parse_time(name: str, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        dt = datetime.fromisoformat(value.strip())
    except ValueError as exc:
        raise ToolError(
            f"invalid_request: {name}={value!r} is not an ISO 8601 time; "
            "use e.g. '2026-12-01T12:00:00Z' or '2026-12-01'"
        ) from exc
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)


# -- unknown arguments ---------------------------------------------------------------------


def reject_unknown_arguments(server: MCPServer[Any]) -> Any:
    """Middleware: a tools/call with arguments the tool does not take is refused, by name."""
    allowed: dict[str, list[str]] = {}

    async def middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        params = ctx.params
        if ctx.method == "tools/call" and isinstance(params, Mapping):
            name, args = params.get("name"), params.get("arguments")
            if not allowed:
                for tool in await server.list_tools():
                    allowed[tool.name] = sorted(tool.input_schema.get("properties", {}))
            if isinstance(name, str) and name in allowed and isinstance(args, Mapping):
                known = allowed[name]
                extra = sorted(str(k) for k in args if k not in known)
                if extra:
                    return _unknown_arguments_result(name, extra, known)
        return await call_next(ctx)

    return middleware


def _unknown_arguments_result(tool: str, extra: list[str], known: list[str]) -> CallToolResult:
    hints = []
    for arg in extra:
        close = difflib.get_close_matches(arg, known, n=1)
        if close:
            hints.append(f"{arg!r} -> did you mean {close[0]!r}?")
    text = f"invalid_request: unknown argument(s) {extra} for tool {tool}; it takes {known}" + (
        f" ({'; '.join(hints)})" if hints else ""
    )
    return CallToolResult(is_error=True, content=[TextContent(type="text", text=text)])


# -- resources and prompt ------------------------------------------------------------------


def _register_resources(server: MCPServer[Any], store: ResultStore) -> None:
    def load(result_id: str) -> ProfileResult:
        try:
            return store.load(validate_result_id(result_id))
        except NsightCoreError as err:
            raise ResourceNotFoundError(f"{err.error_class.value}: {err}") from err
        except CorruptResultError as err:
            raise ResourceError(str(err)) from err

    @server.resource(
        "nspy://results",
        name="results",
        description="The 50 most recent results (summaries), newest first.",
        mime_type="application/json",
    )
    def recent_results() -> str:
        page = store.query(limit=50)
        return "[" + ",".join(s.model_dump_json() for s in page.summaries) + "]"

    @server.resource(
        "nspy://results/{result_id}",
        name="result",
        description="A whole stored result (ProfileResult JSON, raw per-run values included).",
        mime_type="application/json",
    )
    def result_resource(result_id: str) -> str:
        return load(result_id).model_dump_json()

    parts: dict[str, str] = {
        "rows": "Rows with statistics, trust verdicts and raw per-run values.",
        "comparisons": "Candidate vs reference comparisons (Speedup, CI, Resolvable).",
        "correctness": "Correctness verdicts per candidate and config.",
        "failures": "Failures of callables, runs or the whole job.",
    }

    def part_reader(part: str) -> Any:
        def read_part(result_id: str) -> str:
            items = getattr(load(result_id), part)
            return "[" + ",".join(item.model_dump_json() for item in items) + "]"

        read_part.__name__ = f"result_{part}"
        return read_part

    for part, description in parts.items():
        server.resource(
            f"nspy://results/{{result_id}}/{part}",
            name=f"result-{part}",
            description=description,
            mime_type="application/json",
        )(part_reader(part))

    @server.resource(
        "nspy://results/{result_id}/manifest",
        name="result-manifest",
        description="The request, status, times, provenance and artifact paths of a result.",
        mime_type="application/json",
    )
    def manifest_resource(result_id: str) -> str:
        result = load(result_id)
        request = store.load_request(result.result_id)
        return _manifest_json(result, request)


def _manifest_json(result: ProfileResult, request: ProfileRequest) -> str:
    return json.dumps(
        {
            "result_id": result.result_id,
            "status": result.status,
            "created_at": result.created_at,
            "finished_at": result.finished_at,
            "request": request.model_dump(mode="json"),
            "provenance": result.provenance.model_dump(mode="json") if result.provenance else None,
            "artifacts": result.artifacts,
        }
    )


def _register_prompt(server: MCPServer[Any]) -> None:
    @server.prompt(
        name="optimize_kernel",
        title="Optimize a kernel with nspy-mcp",
        description="The check -> validate -> profile -> read -> iterate loop, for one kernel.",
    )
    def optimize_kernel(
        reference: str = "ref.py:kernel",
        inputs: str = "ref.py:make_inputs",
        goal: str = "a faster candidate that stays correct",
    ) -> str:
        return (
            f"Goal: {goal}. Reference: {reference}; inputs: {inputs}.\n"
            "1. Call check_environment once; pick a backend it says works here "
            "('ncu' for counters, 'events' for time only) and act on its remediation text.\n"
            "2. If you want metrics beyond the default, call validate_metrics and fix every "
            "name it does not call valid.\n"
            "3. Write one or more candidates in files, then call profile_candidates with "
            f"reference={reference!r}, inputs={inputs!r}, your candidates, a few "
            "representative configs, runs >= 3 and an absolute workdir.\n"
            "4. If the answer says 'running', call read_results with its result_id "
            "(wait_s waits). Read correctness first: a candidate that failed is not timed; "
            "fix it. Then read comparisons: trust only Resolvable speedups on rows with "
            "Trust 'ok'; a null value comes with ErrorClass and Error.\n"
            "5. Change one thing, profile again, compare with read_results; stop when the "
            "speedup is resolvable and stable. Never change GPU clocks, power or driver "
            "settings."
        )


# -- the server ----------------------------------------------------------------------------


def build_server(
    store: str | Path | ResultStore | None = None, *, retention: Retention | None = None
) -> MCPServer[AppState]:
    """The nspy-mcp server on the result store at `store` (default: see docs/results.md)."""
    result_store = (
        store if isinstance(store, ResultStore) else ResultStore(store, retention=retention)
    )
    locks = DeviceLocks()

    @asynccontextmanager
    async def lifespan(_: MCPServer[AppState]) -> AsyncIterator[AppState]:
        async with anyio.create_task_group() as tg:
            jobs = JobQueue(result_store, tg, locks)
            try:
                yield AppState(store=result_store, jobs=jobs)
            finally:
                jobs.shutdown()

    server: MCPServer[AppState] = MCPServer(
        "nspy-mcp",
        title="nspy-mcp: check and profile GPU kernels",
        version=__version__,
        instructions=INSTRUCTIONS,
        lifespan=lifespan,
        log_level="WARNING",
    )
    server.middleware.append(reject_unknown_arguments(server))
    server.tool(title="Check the profiling environment", annotations=READ_ONLY)(check_environment)
    server.tool(title="Validate ncu metric names", annotations=READ_ONLY)(validate_metrics)
    server.tool(title="Check and profile kernel candidates", annotations=PROFILING)(
        profile_candidates
    )
    server.tool(title="Read stored results", annotations=READ_ONLY)(read_results)
    _register_resources(server, result_store)
    _register_prompt(server)
    return server


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(*, http: bool, host: str, port: int, store: str | None) -> int:
    """Run the server: stdio by default, streamable HTTP on a loopback address with `http`."""
    if http and not _is_loopback(host):
        # profile_candidates runs the code it is given; without authentication that must
        # not be reachable from other machines.
        sys.stderr.write(
            f"nspy-mcp: refusing to serve HTTP on {host!r}: profile_candidates runs code and "
            "the server has no authentication. Use 127.0.0.1 (and an SSH tunnel if remote).\n"
        )
        return 2
    server = build_server(store)
    if http:
        server.run("streamable-http", host=host, port=port)
    else:
        server.run()
    return 0
