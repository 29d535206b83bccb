#!/usr/bin/env python3
"""Benchmark how long `nspy-mcp` takes to start for the commands meant for people.

    python tools/bench/bench_cli_startup.py [--repeat 15]

Each command runs as a fresh ``python -m nspy_mcp ...`` process, ``--repeat`` times; the
median wall time is printed next to the median of ``python -c pass`` measured in the same
run, and as a ratio to it, so machines of different speed can be compared. ``serve`` is
measured as the import of the server module (``python -c "import nspy_mcp.server"``): that
is what the people's commands no longer pay. A ratio near 1 means start-up is the
interpreter's own; the MCP SDK alone used to make ``--help`` about 20 times slower.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

COMMANDS: list[tuple[str, list[str]]] = [
    ("python -c pass", ["-c", "pass"]),
    ("nspy-mcp --help", ["-m", "nspy_mcp", "--help"]),
    ("nspy-mcp --version", ["-m", "nspy_mcp", "--version"]),
    ("nspy-mcp report (missing file)", ["-m", "nspy_mcp", "report", "missing.ncu-rep"]),
    ("nspy-mcp metrics --chip gh100", ["-m", "nspy_mcp", "metrics", "x", "--chip", "gh100"]),
    ("import nspy_mcp.server (serve)", ["-c", "import nspy_mcp.server"]),
]


def median_s(args: list[str], repeat: int, cwd: str) -> float:
    """Median wall time of `python ARGS` over `repeat` fresh processes (one warm-up first)."""
    times: list[float] = []
    for i in range(repeat + 1):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, *args],
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=120,
            check=False,
        )
        if i:  # the first run warms the file cache and the .pyc files
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--repeat", type=int, default=15, help="processes per command (median)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as cwd:
        baseline = median_s(COMMANDS[0][1], args.repeat, cwd)
        print(f"{'command':34s} {'median ms':>10s} {'x python -c pass':>17s}")
        for label, argv in COMMANDS:
            t = baseline if argv is COMMANDS[0][1] else median_s(argv, args.repeat, cwd)
            print(f"{label:34s} {t * 1e3:10.1f} {t / baseline:17.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
