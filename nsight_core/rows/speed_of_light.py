"""One run's kernels folded into speed-of-light numbers, from what ncu collects for ``diagnose``.

The collection plan (the metrics and sections the ncu backend adds) is the ncu backend's
(collectors/ncu_diagnose.py); a metric added there is a field of `RunSol` here. Kernels of
one run are folded (times and bytes add up, percentages are time-weighted) and
runs are summarised by their median.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nsight_core.collectors.ncu_diagnose import (
    BLOCK,
    DRAM_BYTES,
    DRAM_CLOCK,
    DRAM_PEAK_PER_CYCLE,
    GRID,
    MEM_PCT,
    SM_PCT,
    TENSOR_PCT,
    WAVES,
)
from nsight_core.request import DEFAULT_METRIC

# -- per-run speed-of-light values -------------------------------------------------------


@dataclass(frozen=True)
class RunSol:
    """One run's speed-of-light numbers, its kernels folded (None: not measured)."""

    time_ns: float | None = None
    sm_pct: float | None = None
    mem_pct: float | None = None
    tensor_pct: float | None = None
    dram_bytes: float | None = None
    dram_peak_bps: float | None = None
    grid: float | None = None
    block: float | None = None
    waves: float | None = None
    kernels: tuple[str, ...] = ()


def _weighted(times: Sequence[float | None], values: Sequence[float | None]) -> float | None:
    if any(v is None for v in values) or any(t is None for t in times):
        return None
    total = math.fsum(t for t in times if t is not None)
    if total <= 0:
        return None
    return math.fsum(t * v for t, v in zip(times, values, strict=True) if t and v is not None) / (
        total
    )


def _sum(values: Sequence[float | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return math.fsum(v for v in values if v is not None)


def _max(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known and len(known) == len(values) else None


def fold_kernels(kernels: Sequence[Mapping[str, float | None]], names: Sequence[str]) -> RunSol:
    """One run's kernels -> one `RunSol`: times and bytes add up (serial kernels), the
    percentages are weighted by each kernel's time, the launch shape is the largest."""
    if not kernels:
        return RunSol(kernels=tuple(names))
    times = [k.get(DEFAULT_METRIC) for k in kernels]
    peaks = []
    for k in kernels:
        per_cycle, clock = k.get(DRAM_PEAK_PER_CYCLE), k.get(DRAM_CLOCK)
        peaks.append(per_cycle * clock if per_cycle is not None and clock is not None else None)
    known_peaks = [p for p in peaks if p is not None and p > 0]
    return RunSol(
        time_ns=_sum(times),
        sm_pct=_weighted(times, [k.get(SM_PCT) for k in kernels]),
        mem_pct=_weighted(times, [k.get(MEM_PCT) for k in kernels]),
        tensor_pct=_weighted(times, [k.get(TENSOR_PCT) for k in kernels]),
        dram_bytes=_sum([k.get(DRAM_BYTES) for k in kernels]),
        dram_peak_bps=statistics.median(known_peaks) if known_peaks else None,
        grid=_max([k.get(GRID) for k in kernels]),
        block=_max([k.get(BLOCK) for k in kernels]),
        waves=_max([k.get(WAVES) for k in kernels]),
        kernels=tuple(names),
    )


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def median_sol(runs: Sequence[RunSol]) -> RunSol:
    """The median of each field over runs (a failed or unmeasured run drops out)."""
    return RunSol(
        time_ns=_median([r.time_ns for r in runs]),
        sm_pct=_median([r.sm_pct for r in runs]),
        mem_pct=_median([r.mem_pct for r in runs]),
        tensor_pct=_median([r.tensor_pct for r in runs]),
        dram_bytes=_median([r.dram_bytes for r in runs]),
        dram_peak_bps=_median([r.dram_peak_bps for r in runs]),
        grid=_median([r.grid for r in runs]),
        block=_median([r.block for r in runs]),
        waves=_median([r.waves for r in runs]),
        kernels=next((r.kernels for r in runs if r.kernels), ()),
    )
