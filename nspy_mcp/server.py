"""The MCP server: four thin tools over nsight_core, built by `build_server`.

Each tool (`tools`) parses its arguments (pydantic models, so every tool has an input and an
output schema), calls nsight_core or the job queue, and returns a model; this module
registers them, with what `tools/list` says of each, and serves. The rest lives in modules
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
from pathlib import Path

import anyio
import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from nsight_core.host.catalog import warm_metric_check
from nsight_core.host.probe import EnvironmentReport
from nsight_core.plan.config import EngineConfig
from nsight_core.processes.sandbox import protect_this_process
from nsight_core.store.result_store import ResultStore, Retention, default_store_root
from nspy_mcp.cluster import DaskExecutor
from nspy_mcp.devices import DeviceLocks
from nspy_mcp.executors import Executor, LocalExecutor, parse_executor
from nspy_mcp.jobs import JobQueue
from nspy_mcp.prompts import register_prompt
from nspy_mcp.resources import register_resources
from nspy_mcp.schemas import OutputPolicy
from nspy_mcp.skills import SkillsExtension
from nspy_mcp.tasks import TasksExtension
from nspy_mcp.tool_errors import reject_unknown_arguments
from nspy_mcp.tool_server import AppState, ToolServer
from nspy_mcp.tools import check_environment, profile_candidates, read_results, validate_metrics
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
An answer carries every field of its output schema, null or empty where it has no value.
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
            "ProfileResult.message",
            "ProfileResult.error",
            "ProfileResult.diagnoses",
            "ProfileResult.stages",
            "ProfileResult.best_so_far",
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
    deep=frozenset(EnvironmentReport.model_json_schema()["$defs"]) - {"CanaryCheck"},
    documented=frozenset(
        {
            "EnvironmentReport.ncu",
            "EnvironmentReport.ncu_problem",
            "EnvironmentReport.canaries",
        }
    ),
)
"""check_environment's answer: every section validated to the leaves but the deep check's
canaries, checked by type (docs/environment.md documents their fields): they cost every
session's tools/list nothing but the field itself. Described: which ncu runs jobs and why
none does, and when canaries are there; the other fields say by name what they hold."""
METRICS_OUTPUT = OutputPolicy(
    documented=frozenset(
        {
            "MetricsValidation.chip_source",
            "MetricsValidation.catalog_source",
            "MetricsValidation.estimated_passes",
        }
    )
)
"""validate_metrics' answer, validated to the leaves; described where a name does not say
what its values mean."""
READ_OUTPUT = OutputPolicy(
    deep=frozenset({"ProfileResult", "ResultSummary"}),
    documented=frozenset({"ReadResultsAnswer.message"}),
)
"""read_results' answer: the result's own fields and the listing's summaries; the parts of a
result are described once, in profile_candidates' output schema, and which of `result` and
`results` an answer fills, in the tool's description."""


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
    server.register_tool(validate_metrics, "Validate ncu metric names", READ_ONLY, METRICS_OUTPUT)
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
