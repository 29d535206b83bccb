#!/usr/bin/env python3
"""Benchmark the environment probe's cache and offline metric validation.

    python tools/bench/bench_env_metrics.py [--catalog-dir DIR] [--repeat 200]

Reports medians over many calls, each next to a baseline measured in the same run (a
``json.loads`` of the cached probe file, and an empty function call) so numbers from
different machines can be compared, and the goals: a cached `probe_environment` under
100 ms, `validate_metrics` of 10 names under 50 ms after the first load.

``--catalog-dir`` points the shipped-catalog lookup at another directory (for example the
output of tools/record_catalogs.py) before catalogs are committed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from nsight_core.host import catalog, probe
from nsight_core.plan.config import EngineConfig

NAMES = [
    "gpu__time_duration.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_read.sum",
    "smsp__inst_executed.sum",
    "launch__grid_size",
    "dram__throughput",
    "dram__througput.avg.pct_of_peak_sustained_elapsed",
    "gpu__time_duraton.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsd",
]
"""Six valid names, one base needing a suffix, three typos: a realistic mix."""


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _line(what: str, ms: float, base_ms: float, goal_ms: float | None) -> str:
    ratio = ms / base_ms if base_ms > 0 else float("inf")
    goal = f"goal < {goal_ms:g} ms: {'ok' if ms < goal_ms else 'MISSED'}" if goal_ms else ""
    return f"{what:<48s} {ms:9.3f} ms  {ratio:9.1f}x baseline  {goal}\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--catalog-dir", help="directory laid out like nsight_core/data/catalogs")
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--chip", default="gh100")
    args = ap.parse_args(argv)
    if args.catalog_dir:
        catalog.SHIPPED_DIR = Path(args.catalog_dir)
    w = sys.stdout.write
    config = EngineConfig.from_env()

    t0 = time.perf_counter()
    report = probe.probe_environment(config, refresh=True)
    w(
        f"first probe (uncached)                           {(time.perf_counter() - t0) * 1e3:9.3f} ms\n"
    )
    cache_file = probe.cache_dir(config) / f"probe-{probe.cache_key(False, config)}.json"
    raw = cache_file.read_bytes() if cache_file.exists() else report.model_dump_json().encode()

    import json

    base_json = median_ms(lambda: json.loads(raw), args.repeat)
    base_empty = median_ms(lambda: None, args.repeat)
    w(f"baseline json.loads(cached probe file)           {base_json:9.3f} ms\n")
    w(f"baseline empty call                              {base_empty:9.4f} ms\n")

    mem = median_ms(lambda: probe.probe_environment(config), args.repeat)
    w(_line("probe_environment(), in-process cache", mem, base_json, 100))

    def from_file() -> object:
        probe._memory_cache.clear()
        return probe.probe_environment(config)

    w(_line("probe_environment(), file cache", median_ms(from_file, args.repeat), base_json, 100))

    shipped = catalog.shipped_catalogs()
    if not any(args.chip in chips for chips in shipped.values()):
        w(f"validate_metrics: skipped, no {args.chip} catalog under {catalog.SHIPPED_DIR}\n")
        return 0
    t0 = time.perf_counter()
    v = catalog.validate_metrics(NAMES, args.chip, source="shipped", config=config)
    w(
        f"validate_metrics first call (loads the catalog)  {(time.perf_counter() - t0) * 1e3:9.3f} ms"
        f"  [{sum(c.status == 'valid' for c in v.metrics)}/10 valid]\n"
    )
    ms = median_ms(
        lambda: catalog.validate_metrics(NAMES, args.chip, source="shipped", config=config),
        args.repeat,
    )
    w(_line("validate_metrics(10 names), offline", ms, base_json, 50))
    return 0


if __name__ == "__main__":
    sys.exit(main())
