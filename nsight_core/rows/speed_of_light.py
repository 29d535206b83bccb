"""What ncu collects for ``diagnose``, and one run's kernels folded into speed-of-light numbers.

The collection plan (the metrics and sections the ncu backend adds) and the per-run values
read back from them belong together: a metric added here is a field of `RunSol` there.
Kernels of one run are folded (times and bytes add up, percentages are time-weighted) and
runs are summarised by their median.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nsight_core.request import DEFAULT_METRIC

# -- what ncu collects -----------------------------------------------------------------

SM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEM_PCT = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
DRAM_BYTES = "dram__bytes.sum"
DRAM_RATE = "dram__bytes.sum.per_second"
DRAM_PEAK_PER_CYCLE = "dram__bytes.sum.peak_sustained"
DRAM_CLOCK = "dram__cycles_elapsed.avg.per_second"
TENSOR_PCT = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"
GRID = "launch__grid_size"
BLOCK = "launch__block_size"
WAVES = "launch__waves_per_multiprocessor"

DIAGNOSE_METRICS: tuple[str, ...] = (
    DEFAULT_METRIC,
    SM_PCT,
    MEM_PCT,
    DRAM_BYTES,
    DRAM_RATE,
    DRAM_PEAK_PER_CYCLE,
    DRAM_CLOCK,
    TENSOR_PCT,
    GRID,
    BLOCK,
    WAVES,
)
"""Added to ncu's ``--metrics`` by ``diagnose``. All are checked against the shipped gh100
catalog by a test. `DRAM_PEAK_PER_CYCLE` x `DRAM_CLOCK` is the peak DRAM bandwidth as ncu
itself computes it (bytes per DRAM cycle at sustained peak, times DRAM cycles per second);
the tensor metric counts every tensor op type (HMMA/HGMMA/IMMA...; on gh100 `hmma` alone
also covers HGMMA, but not IMMA)."""

DIAGNOSE_SECTIONS: tuple[str, ...] = ("SpeedOfLight",)
"""ncu sections added by ``diagnose``, so ncu applies the section's rules (SOLBottleneck
and friends) and the report carries their results. The section's own metrics overlap ours."""


def diagnose_metrics(requested: Sequence[str]) -> list[str]:
    """The metrics ncu collects with ``diagnose``: the requested ones first, then ours."""
    return list(dict.fromkeys([*requested, *DIAGNOSE_METRICS]))


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
