"""The GPU's SM clock and temperature around a row's runs, and the noise they explain.

The judge reads NVML right before each timed call goes out and right after its reply comes
back (judge/gpu_state.py says why there, and why not under ncu) and reports one
`GpuStateEvent` per run that counts. Here they become each row's `GpuState`, the readings
of its annotation and config (every metric of it alike), and a verdict through `marked`,
the one rule by which rows gain Reasons and lose Trust. A row's runs are not steady when

- the SM clock moved: the readings' spread (highest - lowest) is at least `CLOCK_MOVED_PCT`
  of the highest. A compute-bound kernel's time scales with the clock, so a clock that
  moved that much can move the time as much as the spread that makes a row 'noisy' anyway;
- or a slowdown reason (`SLOWDOWN_REASONS`) was active at a reading: the driver held the
  clock down for power or heat, so the runs ran slower than the GPU can.

Such a row is 'noisy', not 'suspicious': the host moved, not the candidate, and the readings
are the judge's own, out of candidate code's reach. An idle GPU (NVML's ``gpu_idle``) and
clock settings (application clocks, sync boost, display clock) are no slowdown: they are
left out of `Throttle` and the rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from nsight_core.protocol import GpuStateEvent
from nsight_core.results import GpuReadings, Row, marked
from nsight_core.rows.aggregate import STABLE_RSD_PCT

CLOCK_MOVED_PCT = STABLE_RSD_PCT
"""A clock spread at or above this share of the highest reading makes a row noisy: the
spread of times at which a row is noisy anyway (see the module docstring)."""

SLOWDOWN_REASONS = (
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)
"""NVML clock-event reasons (host/thermal.py's names) that mean the clock was held down."""


def _spans(runs: Iterable[int]) -> str:
    """Run indices as ranges: [0, 2, 3, 4] -> '0, 2-4'."""
    out: list[str] = []
    ordered = sorted(set(runs))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ", ".join(out)


def _in_order(events: Sequence[GpuStateEvent]) -> list[GpuStateEvent]:
    return sorted(events, key=lambda e: e.run)


def gpu_readings(events: Sequence[GpuStateEvent]) -> GpuReadings | None:
    """One row's `GpuState` from its runs' readings; None when there are none."""
    if not events:
        return None
    ordered = _in_order(events)
    clocks = [c for e in ordered for c in e.sm_mhz if c is not None]
    temps = [t for e in ordered for t in e.temp_c if t is not None]
    seen = [r for e in ordered for rs in e.reasons for r in rs if r in SLOWDOWN_REASONS]
    return GpuReadings(
        SmClockMHz=[min(clocks), max(clocks)] if clocks else [],
        SmClockStartEndMHz=[clocks[0], clocks[-1]] if clocks else [],
        TempC=[min(temps), max(temps)] if temps else [],
        Throttle=list(dict.fromkeys(seen)),
    )


def _clock_moved(ordered: Sequence[GpuStateEvent]) -> str | None:
    """'SM clock 1980->1755 MHz in runs 3-5' when the clock moved, else None."""
    timeline = [(e.run, c) for e in ordered for c in e.sm_mhz if c is not None]
    if not timeline:
        return None
    clocks = [c for _, c in timeline]
    hi, lo = max(clocks), min(clocks)
    if hi <= 0 or 100.0 * (hi - lo) / hi < CLOCK_MOVED_PCT:
        return None
    first, last = (hi, lo) if clocks.index(hi) < clocks.index(lo) else (lo, hi)
    low_runs = [run for run, c in timeline if 100.0 * (hi - c) / hi >= CLOCK_MOVED_PCT]
    return (
        f"SM clock {first}->{last} MHz (runs {_spans(low_runs)} at least "
        f"{CLOCK_MOVED_PCT:g} % below its highest)"
    )


def unsteady_reason(events: Sequence[GpuStateEvent]) -> str | None:
    """Why one row's runs were not steady (see the module docstring); None when they were."""
    ordered = _in_order(events)
    parts = []
    moved = _clock_moved(ordered)
    if moved is not None:
        parts.append(moved)
    for reason in SLOWDOWN_REASONS:
        runs = [e.run for e in ordered if any(reason in rs for rs in e.reasons)]
        if runs:
            parts.append(f"{reason} in runs {_spans(runs)}")
    if not parts:
        return None
    temps = [t for e in ordered for t in e.temp_c if t is not None]
    if temps:
        parts.append(f"{min(temps)}-{max(temps)} C")
    return (
        f"the GPU was not steady during the runs (NVML, read by the judge): {'; '.join(parts)}. "
        "The host's doing, not the candidate's: comparisons pair runs, which cancels part of "
        "it; add runs, or profile again on a cool, otherwise idle GPU"
    )


def apply_gpu_states(rows: Sequence[Row], events: Sequence[GpuStateEvent]) -> list[Row]:
    """Each row with its runs' `GpuState`, and 'noisy' with the reason where they were not
    steady; rows without readings (ncu, no NVML, a CPU job) pass unchanged."""
    by_group: dict[tuple[str, int], list[GpuStateEvent]] = {}
    for e in events:
        by_group.setdefault((e.annotation, e.config_id), []).append(e)
    out = []
    for row in rows:
        group = by_group.get((row.Annotation, row.ConfigId), [])
        state = gpu_readings(group)
        if state is not None:
            row = row.model_copy(update={"GpuState": state})
            reason = unsteady_reason(group)
            if reason is not None:
                row = marked(row, reason, "noisy")
        out.append(row)
    return out
