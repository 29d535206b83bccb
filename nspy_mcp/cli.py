"""The `nspy-mcp` command: parse arguments, then hand over to the module that does the work.

stdout is the MCP protocol under `serve`; the other subcommands are for people and write
their answers to stdout through `sys.stdout.write`, diagnostics to stderr.

Only `serve` and `demo` need the MCP SDK (about half a second to import), so every subcommand
imports its module when it runs: `--help`, `--version`, `env`, `metrics`, `report` and `plot`
never load `mcp` (tests/mcp/test_cli.py holds this).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from nspy_mcp.version import __version__

if TYPE_CHECKING:
    from nsight_core.plan.config import EngineConfig

STDIO_TTY_NOTE = (
    "nspy-mcp: serving MCP over stdio: it reads JSON-RPC messages from an MCP client on stdin\n"
    "and answers on stdout, so in a terminal it waits silently. Register it with a client\n"
    "instead (command `nspy-mcp`, arguments `serve`; see docs/clients.md), or run\n"
    "`nspy-mcp --help` for the commands meant for people (env, metrics, report, demo, plot).\n"
    "Still serving; Ctrl-D or Ctrl-C ends it.\n"
)


def _warm_first_request(config: EngineConfig) -> None:
    from nsight_core.collectors.extract import warm_report_reader  # lazy: serve only
    from nsight_core.host.catalog import warm_metric_check  # lazy: serve only
    from nsight_core.store.result_store import warm_result_validator  # lazy: serve only

    warm_metric_check(config)
    warm_result_validator()
    warm_report_reader()  # last: a first result needs it seconds later, not at once


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nspy-mcp",
        description="MCP tool server for checking and profiling GPU kernel candidates with Nsight Compute.",
    )
    p.add_argument("--version", action="version", version=f"nspy-mcp {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the MCP server (default; stdio)")
    serve.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default loopback)")
    serve.add_argument("--port", type=int, default=8765, help="HTTP port (default 8765)")
    serve.add_argument(
        "--store", default=None, help="result store directory (default: user data dir)"
    )
    serve.add_argument(
        "--executor",
        default=None,
        metavar="local|dask://HOST:PORT",
        help="where jobs run: this host's GPUs (default), or the workers of a Dask "
        "scheduler (needs nspy-mcp[cluster]; docs/cluster.md); default $NSPY_MCP_EXECUTOR",
    )

    demo = sub.add_parser(
        "demo", help="run the whole check-profile-read loop through an MCP client"
    )
    demo.add_argument("--store", default=None, help="result store directory (default: a temp dir)")
    demo.add_argument(
        "--backend",
        choices=["auto", "ncu", "events"],
        default="auto",
        help="default: ncu if usable",
    )

    report = sub.add_parser("report", help="rows from an existing .ncu-rep file (CPU only)")
    report.add_argument("file", help="path of a .ncu-rep report")
    fmt = report.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="JSON rows")
    fmt.add_argument("--csv", action="store_true", help="CSV rows")

    env = sub.add_parser("env", help="print what profiling can do on this machine")
    env.add_argument(
        "--deep",
        action="store_true",
        help="also run a one-kernel ncu test and canary hacks through each working backend",
    )
    env.add_argument("--refresh", action="store_true", help="ignore the cached probe")
    env.add_argument("--json", action="store_true", help="JSON output")

    metrics = sub.add_parser(
        "metrics", help="validate ncu metric names (offline catalogs or live ncu)"
    )
    metrics.add_argument("names", nargs="+", help="metric names")
    metrics.add_argument("--chip", default=None, help="chip, e.g. gh100 (default: from the GPU)")
    metrics.add_argument("--json", action="store_true", help="JSON output")

    plot = sub.add_parser("plot", help="PNG of speedup per candidate and config, with CI bars")
    plot.add_argument("result_id")
    plot.add_argument("-o", "--output", default=None, help="PNG path (default RESULT_ID.png)")
    plot.add_argument("--store", default=None, help="result store directory")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # `nspy-mcp report x | head`: the reader left; not an error
        sys.stderr.close()
        return 0


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    command = args.command or "serve"
    if command == "serve":
        http = getattr(args, "http", False)
        if not http and sys.stdin.isatty():
            sys.stderr.write(STDIO_TTY_NOTE)
        store = getattr(args, "store", None)
        executor = getattr(args, "executor", None)
        # First the GPUs' idle judges (their start is the longest of a fresh server's), then
        # what a first request would otherwise pay for, read while the MCP SDK imports
        # (about half a second): the environment probe, the chip's catalog, the store's
        # result validator and ncu_report's reader.
        from nspy_mcp.executors import start_local  # lazy: serve only

        config = _config()
        local = start_local(store, executor, config)
        try:
            threading.Thread(
                target=_warm_first_request, args=(config,), name="nspy warm probe", daemon=True
            ).start()
            from nspy_mcp.server import serve  # lazy: each command loads only what it needs

            return serve(
                http=http,
                host=getattr(args, "host", "127.0.0.1"),
                port=getattr(args, "port", 8765),
                store=store,
                executor=executor,
                local=local,
                config=config,
            )
        finally:
            if local is not None:  # a server that did not start retires its judges too
                local.close()  # (a no-op once the server's own end retired them)
    if command == "demo":
        from nspy_mcp.demo import run_demo  # lazy: each command loads only what it needs

        return run_demo(store=args.store, backend=args.backend, environ=os.environ)
    if command == "report":
        from nspy_mcp.report_cmd import run_report  # lazy: each command loads only what it needs

        return run_report(args.file, fmt="json" if args.json else "csv" if args.csv else "table")
    if command == "env":
        from nspy_mcp.env_cmd import run_env  # lazy: each command loads only what it needs

        return run_env(deep=args.deep, refresh=args.refresh, as_json=args.json, config=_config())
    if command == "metrics":
        from nspy_mcp.env_cmd import run_metrics  # lazy: each command loads only what it needs

        return run_metrics(args.names, chip=args.chip, as_json=args.json, config=_config())
    if command == "plot":
        from nspy_mcp.plot import run_plot  # lazy: each command loads only what it needs

        return run_plot(args.result_id, output=args.output, store=args.store, config=_config())
    raise AssertionError(command)  # argparse rejects unknown commands


def _config() -> EngineConfig:
    """The engine's settings, read from this process's environment once per command: the
    command is an edge, and everything it calls takes them from here."""
    from nsight_core.plan.config import EngineConfig  # lazy: `--help` and `--version` skip it

    return EngineConfig.from_env()
