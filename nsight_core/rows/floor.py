"""The physical floor: a time row below the time needed to write its outputs is suspicious.

Checked on every backend, independently of ``diagnose``: the judge measures the bytes
(`runtime.leaves.nbytes_of`, sent as a `FloorEvent`); the peak DRAM bandwidth is the GPU's
measured streaming bandwidth where it was calibrated (host/ceilings.py), else the ncu
report's, else the datasheet's (`PEAK_DRAM_TABLE`); each floor names its source.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nsight_core.host.ceilings import GpuCeilings, datasheet_bandwidth
from nsight_core.protocol import EVENTS_METRIC, FloorEvent
from nsight_core.request import DEFAULT_METRIC
from nsight_core.results import Row, suspected
from nsight_core.rows.stats import ns_per

FLOOR_FRACTION = 0.5
"""A time below this fraction of the write floor is flagged. The floor assumes DRAM peak;
outputs small enough to stay in L2 can be written faster (L2 bandwidth is up to about 2x
DRAM's on Hopper), so half the floor is still out of reach for a kernel that writes its
outputs; see docs/diagnose.md."""

PEAK_TABLE_SOURCE = (
    "NVIDIA datasheet peak for {gpu} (PEAK_DRAM_TABLE in nsight_core/host/ceilings.py)"
)


# -- peak bandwidth ----------------------------------------------------------------------


@dataclass(frozen=True)
class Peak:
    """Peak DRAM bandwidth and where it came from."""

    bytes_per_s: float
    source: str


def table_peak(gpu: str | None) -> Peak | None:
    """The datasheet peak for a GPU name ('NVIDIA H200', 'cuda:0 (NVIDIA H200)'); None if
    the name is unknown or the run was on a CPU."""
    peak = datasheet_bandwidth(gpu)
    return Peak(peak, PEAK_TABLE_SOURCE.format(gpu=gpu)) if peak is not None else None


def measured_peak(measured: GpuCeilings) -> Peak:
    """The streaming bandwidth the GPU reached when calibrated, its source and the datasheet
    value beside it (host/ceilings.py)."""
    sheet = measured.datasheet_bytes_per_s
    beside = f"; datasheet {sheet / 1e12:.3g} TB/s" if sheet else "; no datasheet value known"
    when = time.strftime("%Y-%m-%d", time.gmtime(measured.measured_at))
    return Peak(
        measured.stream_bytes_per_s,
        f"measured on {measured.name} {measured.uuid} on {when}: {measured.stream_method}{beside}",
    )


# -- the floor ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Floor:
    """The bytes a config's call must move, and the times they take at peak bandwidth."""

    bytes_in: int | None
    bytes_out: int | None
    peak: Peak | None

    @property
    def write_ns(self) -> float | None:
        """Writing every output byte at peak: the floor rows are checked against."""
        if self.peak is None or self.bytes_out is None:
            return None
        return self.bytes_out / self.peak.bytes_per_s * 1e9

    @property
    def read_write_ns(self) -> float | None:
        """Reading every input byte and writing every output byte at peak (information)."""
        if self.peak is None or self.bytes_out is None or self.bytes_in is None:
            return None
        return (self.bytes_in + self.bytes_out) / self.peak.bytes_per_s * 1e9


def floors_of(events: Sequence[FloorEvent], peak: Peak | None) -> dict[int, Floor]:
    """Config id -> Floor; the first event of a config wins (the judge sends one)."""
    out: dict[int, Floor] = {}
    for ev in events:
        out.setdefault(ev.config_id, Floor(ev.bytes_in, ev.bytes_out, peak))
    return out


def _ns(row: Row, value: float) -> float | None:
    scale = ns_per(row.Unit)
    if scale is None and row.Metric in (DEFAULT_METRIC, EVENTS_METRIC) and not row.Unit:
        scale = 1.0
    return None if scale is None else value * scale


def _fmt_bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def fmt_ns(ns: float) -> str:
    return f"{ns / 1e3:.3g} us" if ns >= 1e3 else f"{ns:.3g} ns"


def floor_reason(row_ns: float, floor: Floor) -> str | None:
    """Why ``row_ns`` is below the write floor, or None when it is not (clearly) below."""
    write = floor.write_ns
    if write is None or floor.peak is None or floor.bytes_out is None:
        return None
    if row_ns >= FLOOR_FRACTION * write:
        return None
    return (
        f"median time {fmt_ns(row_ns)} is below {FLOOR_FRACTION:g}x the physical floor: "
        f"writing its {_fmt_bytes(floor.bytes_out)} of outputs takes at least "
        f"{fmt_ns(write)} at {floor.peak.bytes_per_s / 1e12:.3g} TB/s ({floor.peak.source}); "
        "the call cannot have produced its outputs in that time (work skipped, cached "
        "results, or a timer that misses the work)"
    )


def apply_floor(rows: Sequence[Row], floors: Mapping[int, Floor]) -> list[Row]:
    """Time rows below the write floor of their config become suspicious, naming it."""
    out = []
    for row in rows:
        floor = floors.get(row.ConfigId)
        ns = _ns(row, row.MedianValue) if row.MedianValue is not None else None
        reason = floor_reason(ns, floor) if floor is not None and ns is not None else None
        if reason is not None:
            row = suspected(row, reason)
        out.append(row)
    return out


def floor_notes(floors: Mapping[int, Floor], gpu: str | None, check_enabled: bool) -> list[str]:
    """Why no floor was checked, when none was (for the result's provenance notes)."""
    if not check_enabled:
        return [
            "no physical floor checked: the correctness check is off, so the judge "
            "never saw an expected output to measure"
        ]
    if not floors:
        return [
            "no physical floor checked: no byte counts from a judge (@kernel jobs have "
            "none; in a request, the reference produced no output)"
        ]
    if gpu is not None and gpu.strip().lower() == "cpu":
        return ["no physical floor checked: the job ran on a CPU"]
    if floors and all(f.peak is None for f in floors.values()):
        return [
            f"no physical floor checked: no peak DRAM bandwidth known for GPU {gpu!r} "
            "(calibrate it with check_environment deep=true, run with diagnose under ncu, "
            "or see PEAK_DRAM_TABLE)"
        ]
    return []
