"""What ncu collects for ``diagnose``: the metrics and sections the ncu backend adds to a
job's command line. Kept with the backend, so that building ncu's command loads nothing of
the row-building code (rows/speed_of_light.py reads the values back into `RunSol`)."""

from __future__ import annotations

from collections.abc import Sequence

from nsight_core.request import DEFAULT_METRIC

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
