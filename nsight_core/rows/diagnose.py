"""What bounds each candidate, and how far it is from the limit: `Diagnosis` and the floor.

Two products, both computed in the parent from raw per-run values:

- `diagnose_groups`: one `Diagnosis` per (annotation, config) from ncu's speed-of-light
  metrics (asked for with ``diagnose: true``; see `DIAGNOSE_METRICS`) and ncu's own rule
  results. Kernels of one run are folded (times and bytes add up, percentages are
  time-weighted), runs are summarised by their median, and the bound is read from the two
  speed-of-light percentages with ncu's own 60 % line (`BOUND_PCT`).
- `apply_floor`: on every backend, a time row whose median lies below `FLOOR_FRACTION` of
  the time needed to write the outputs at peak DRAM bandwidth is made `suspicious`. The
  judge measures the bytes (`runtime.leaves.nbytes_of`, `FloorEvent`); the peak comes from the ncu report
  where there is one, else from `PEAK_DRAM_TABLE` (datasheet numbers, source stated).

Every field of a `Diagnosis` that is null has its reason in ``Why``: nothing is stated
without its evidence. docs/diagnose.md explains each number and when a bound is a guess.

This module reads a report for a diagnosis, classifies the bound and writes the verdict;
the collection plan and the folding of runs are `rows.speed_of_light`, the floor is
`rows.floor`, and ncu's rule text is `rows.ncu_rules`. ``__all__`` keeps the names callers
import from here.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nsight_core.collectors.extract import extract_records
from nsight_core.collectors.ncu_diagnose import (
    DIAGNOSE_METRICS,
    DRAM_CLOCK,
    DRAM_PEAK_PER_CYCLE,
    MEM_PCT,
    SM_PCT,
    TENSOR_PCT,
)
from nsight_core.collectors.ranges import counted_records
from nsight_core.diagnosis import BoundKind, Diagnosis, RuleFinding
from nsight_core.errors import NsightCoreError
from nsight_core.host.ceilings import GpuCeilings
from nsight_core.protocol import FloorEvent, RunKey
from nsight_core.rows.floor import (
    FLOOR_FRACTION,
    Floor,
    Peak,
    apply_floor,
    floor_notes,
    floors_of,
    fmt_ns,
    measured_peak,
    table_peak,
)
from nsight_core.rows.ncu_rules import read_rules
from nsight_core.rows.speed_of_light import RunSol, fold_kernels, median_sol

# -- thresholds ------------------------------------------------------------------------

BOUND_PCT = 60.0
"""A kernel whose compute and memory speed-of-light are both below this is latency-bound.
ncu's SOLBottleneck rule draws the same line ("below 60 % of peak typically indicate
latency issues"); it is ncu's convention, not a derived bound."""

BALANCED_PCT = 10.0
"""Compute and memory within this many points of each other are reported as balanced: the
larger names the bound, and Why says the other is as close."""

DRAM_SHARE = 0.8
"""A memory-bound kernel whose DRAM share is at least this fraction of its busiest memory
unit is DRAM-bound: its headroom is DRAM's. Below, an L1/L2 unit is the limit."""

LAUNCH_FRACTION = 0.5
"""With a host-side time per call known, a kernel taking less than this fraction of it is
'launch/host'-bound: the host, not the GPU, sets the pace."""


# -- reading a report --------------------------------------------------------------------


@dataclass
class GroupInputs:
    """What the report says about one (annotation, config): per-run values and rules."""

    runs: dict[int, RunSol] = field(default_factory=dict)
    rules: list[RuleFinding] = field(default_factory=list)


def read_diagnose_inputs(
    report_path: Path, ignore: Sequence[str] = ()
) -> dict[tuple[str, int], GroupInputs]:
    """Per (annotation, config): each run's folded speed-of-light values and ncu's rules.

    Kernels dropped by the ignore globs, and those of ranges the judge did not issue
    (collectors/ranges.py), are dropped here too, so the diagnosis describes the same
    kernels as the rows.
    """
    report = extract_records(report_path, DIAGNOSE_METRICS)
    records, _ = counted_records(report, report_path)  # the kernels the rows count
    rules = read_rules(report_path)
    per_run: dict[RunKey, dict[int, dict[str, float | None]]] = {}
    names: dict[RunKey, dict[int, str]] = {}
    for rec in records:
        if any(fnmatch.fnmatchcase(rec.kernel, p) for p in ignore):
            continue
        per_run.setdefault(rec.key, {}).setdefault(rec.seq, {})[rec.metric] = rec.value
        names.setdefault(rec.key, {})[rec.seq] = rec.kernel
    out: dict[tuple[str, int], GroupInputs] = {}
    for key, kernels in per_run.items():
        group = out.setdefault((key.annotation, key.config_id), GroupInputs())
        order = sorted(kernels)
        group.runs[key.run] = fold_kernels(
            [kernels[s] for s in order], [names[key][s] for s in order]
        )
        for seq in order:
            for finding in rules[seq] if seq < len(rules) else []:
                if all((f.Rule, f.Title) != (finding.Rule, finding.Title) for f in group.rules):
                    group.rules.append(finding)
    return out


def report_peak(groups: Mapping[tuple[str, int], GroupInputs]) -> Peak | None:
    """The DRAM peak the report measured (median over every run that has it)."""
    peaks = [r.dram_peak_bps for g in groups.values() for r in g.runs.values() if r.dram_peak_bps]
    if not peaks:
        return None
    return Peak(statistics.median(peaks), f"ncu: {DRAM_PEAK_PER_CYCLE} x {DRAM_CLOCK}")


# -- the diagnosis -----------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """The bound, its headroom, the next step, and every reason a number is missing."""

    bound: BoundKind | None
    headroom: float | None = None
    resource: str | None = None
    assumptions: tuple[str, ...] = ()
    next_step: str | None = None
    why: tuple[str, ...] = ()


def _dram_pct(sol: RunSol) -> float | None:
    if sol.dram_bytes is None or not sol.time_ns or not sol.dram_peak_bps:
        return None
    return 100.0 * (sol.dram_bytes / (sol.time_ns * 1e-9)) / sol.dram_peak_bps


def _memory_verdict(sol: RunSol, mem: float, why: list[str]) -> Verdict:
    dram = _dram_pct(sol)
    if dram is not None and dram >= DRAM_SHARE * mem and dram > 0:
        return Verdict(
            "memory",
            headroom=100.0 / dram,
            resource="DRAM bandwidth",
            assumptions=(
                "the kernel keeps moving the same DRAM bytes (dram__bytes.sum)",
                "DRAM could run at ncu's sustained peak (dram__bytes.sum.peak_sustained x "
                "DRAM clock); real kernels seldom pass about 90 % of it",
            ),
            next_step=f"memory-bound at {dram:.0f} % of peak DRAM bandwidth: reduce bytes "
            "moved (lower precision, recompute instead of load), or fuse with a neighbour",
            why=tuple(why),
        )
    if dram is None:
        why.append(
            "DRAM share unknown (dram__bytes.sum, time or peak missing): headroom "
            "is the busiest memory unit's"
        )
    return Verdict(
        "memory",
        headroom=100.0 / mem if mem > 0 else None,
        resource="busiest memory unit (L1, L2 or DRAM)",
        assumptions=(
            "the busiest memory unit could reach 100 % of its sustained peak",
            "the traffic on that unit stays the same",
        ),
        next_step=f"memory-bound at {mem:.0f} % of the busiest memory unit"
        + (f" but only {dram:.0f} % of DRAM bandwidth" if dram is not None else "")
        + ": improve access patterns (coalescing, cache reuse, shared-memory bank conflicts)",
        why=tuple(why),
    )


def _compute_verdict(sol: RunSol, sm: float, why: list[str]) -> Verdict:
    tensor = sol.tensor_pct
    if tensor is not None and tensor >= BOUND_PCT:
        step = (
            f"compute-bound, tensor pipe at {tensor:.0f} % of peak: little is left in "
            "this algorithm; look for less work (skip zeros, lower precision such as fp8)"
        )
    elif tensor is not None and tensor > 1.0:
        step = (
            f"compute-bound at {sm:.0f} % of SM peak, tensor pipe at {tensor:.0f} %: feed "
            "the tensor cores better (larger tiles, async copies, fewer non-MMA instructions)"
        )
    else:
        step = (
            f"compute-bound at {sm:.0f} % of SM peak without tensor cores: move the math "
            "onto tensor cores if it is a matmul, else cut instructions per element"
        )
    return Verdict(
        "compute",
        headroom=100.0 / sm if sm > 0 else None,
        resource="SM (busiest pipe)",
        assumptions=(
            "the busiest SM pipe could reach 100 % of its sustained peak",
            "the instruction mix stays the same",
        ),
        next_step=step,
        why=tuple(why),
    )


def classify(sol: RunSol, host_ns: float | None = None) -> Verdict:
    """The bound of a kernel (or the folded kernels of a call) from its median numbers.

    ``host_ns`` is a host-side time per call (from a timer cross-check) where one exists;
    with it, a kernel much shorter than the call is 'launch/host'-bound. Without it that
    bound is never claimed.
    """
    why: list[str] = []
    if host_ns is not None and sol.time_ns is not None and sol.time_ns < LAUNCH_FRACTION * host_ns:
        return Verdict(
            "launch/host",
            resource="host launch path",
            next_step=f"kernel time {fmt_ns(sol.time_ns)} is under {LAUNCH_FRACTION:g}x the "
            f"host's {fmt_ns(host_ns)} per call: batch calls, capture a CUDA graph, or fuse "
            "launches",
            why=("headroom: the GPU is idle between launches; no counter bounds host time",),
        )
    if host_ns is None:
        why.append("launch/host not assessed: no host-side time per call is known")
    if sol.sm_pct is None or sol.mem_pct is None:
        missing = [n for n, v in ((SM_PCT, sol.sm_pct), (MEM_PCT, sol.mem_pct)) if v is None]
        return Verdict(
            None,
            why=(*why, f"no bound: {', '.join(missing)} not measured (needs diagnose under ncu)"),
        )
    sm, mem = sol.sm_pct, sol.mem_pct
    if max(sm, mem) < BOUND_PCT:
        shape = ""
        if sol.waves is not None and sol.waves < 1.0:
            shape = f"; the grid fills {sol.waves:.2g} of one wave of the GPU" + (
                f" ({sol.grid:.0f} blocks)" if sol.grid is not None else ""
            )
        return Verdict(
            "latency",
            next_step=f"latency-bound (compute {sm:.0f} %, memory {mem:.0f} % of peak{shape}): "
            + (
                "launch more blocks or give this work to a neighbouring kernel (fuse)"
                if shape
                else "raise parallelism per SM (occupancy, more independent loads "
                "in flight, software pipelining)"
            ),
            why=(
                *why,
                f"headroom: compute and memory are both below {BOUND_PCT:g} % of peak, "
                "so no throughput limit bounds the speedup; latency has no counter peak",
            ),
        )
    if abs(sm - mem) <= BALANCED_PCT:
        why.append(
            f"compute ({sm:.0f} %) and memory ({mem:.0f} %) are within "
            f"{BALANCED_PCT:g} points: both limits are close"
        )
    return _memory_verdict(sol, mem, why) if mem >= sm else _compute_verdict(sol, sm, why)


def diagnose_group(
    annotation: str,
    config_id: int,
    params: Mapping[str, Any],
    inputs: GroupInputs | None,
    floor: Floor | None,
    *,
    backend_has_counters: bool,
    host_ns: float | None = None,
) -> Diagnosis:
    """One `Diagnosis` from the group's runs, its floor, and the rules ncu reported."""
    why: list[str] = []
    runs = list(inputs.runs.values()) if inputs else []
    sol = median_sol(runs) if runs else RunSol()
    if not backend_has_counters:
        why.append(
            "no speed-of-light numbers: this backend reads no counters; use backend "
            "'ncu' with diagnose for the bound"
        )
        verdict = Verdict(None)
    elif not runs:
        why.append("no speed-of-light numbers: the report has no kernel of this call")
        verdict = Verdict(None)
    else:
        verdict = classify(sol, host_ns)
    why += verdict.why
    dram_bw = (
        sol.dram_bytes / (sol.time_ns * 1e-9)
        if sol.dram_bytes is not None and sol.time_ns
        else None
    )
    if backend_has_counters and runs:
        if dram_bw is None:
            why.append("DramBandwidth: dram__bytes.sum or the time is missing")
        if sol.dram_peak_bps is None:
            why.append(
                "DramPeakBandwidth: the report lacks dram__bytes.sum.peak_sustained "
                "or dram__cycles_elapsed.avg.per_second"
            )
        if sol.tensor_pct is None:
            why.append(f"TensorPipePct: {TENSOR_PCT} not measured")
        if not (inputs and inputs.rules):
            why.append(
                "Rules: the report carries no ncu rule result for these kernels "
                "(rules come with --section SpeedOfLight)"
            )
    write_ns = floor.write_ns if floor else None
    if floor is None:
        why.append(
            "FloorNs: the judge reported no bytes for this config (@kernel jobs, or "
            "the check is off)"
        )
    elif write_ns is None:
        why.append(
            "FloorNs: "
            + (
                "no peak DRAM bandwidth is known for this GPU"
                if floor.peak is None
                else "the output has no array bytes"
            )
        )
    if (
        sol.time_ns is not None
        and sol.dram_bytes is not None
        and sol.dram_peak_bps
        and sol.time_ns < FLOOR_FRACTION * sol.dram_bytes / sol.dram_peak_bps * 1e9
    ):
        why.append(
            "measured DRAM bytes over the time exceed the DRAM peak: the time or the "
            "byte count is wrong (replayed or overlapped kernels?)"
        )
    dram_pct = _dram_pct(sol)
    return Diagnosis(
        Annotation=annotation,
        ConfigId=config_id,
        Params=dict(params),
        Bound=verdict.bound,
        TimeNs=sol.time_ns,
        ComputeThroughputPct=sol.sm_pct,
        MemoryThroughputPct=sol.mem_pct,
        TensorPipePct=sol.tensor_pct,
        DramBytes=sol.dram_bytes,
        DramBandwidth=dram_bw,
        DramPeakBandwidth=sol.dram_peak_bps,
        DramPct=dram_pct,
        Headroom=verdict.headroom,
        HeadroomResource=verdict.resource,
        Assumptions=list(verdict.assumptions),
        FloorNs=write_ns,
        ReadWriteFloorNs=floor.read_write_ns if floor else None,
        FloorBytesIn=floor.bytes_in if floor else None,
        FloorBytesOut=floor.bytes_out if floor else None,
        PeakSource=floor.peak.source if floor and floor.peak else None,
        GridSize=sol.grid,
        BlockSize=sol.block,
        Kernels=list(sol.kernels),
        NumRuns=len(runs),
        Rules=list(inputs.rules) if inputs else [],
        NextStep=verdict.next_step,
        Why=why,
    )


def diagnose_groups(
    groups: Sequence[tuple[str, int]],
    configs: Sequence[Mapping[str, Any]],
    inputs: Mapping[tuple[str, int], GroupInputs],
    floors: Mapping[int, Floor],
    *,
    backend_has_counters: bool,
) -> list[Diagnosis]:
    """One `Diagnosis` per (annotation, config), in the order given."""
    return [
        diagnose_group(
            ann,
            cid,
            configs[cid] if 0 <= cid < len(configs) else {},
            inputs.get((ann, cid)),
            floors.get(cid),
            backend_has_counters=backend_has_counters,
        )
        for ann, cid in groups
    ]


@dataclass(frozen=True)
class JobDiagnosis:
    """What diagnose.py adds to a finished job: diagnoses, floors for the rows, notes."""

    diagnoses: list[Diagnosis]
    floors: dict[int, Floor]
    notes: list[str]


def diagnose_run(
    report_path: Path | None,
    *,
    diagnose: bool,
    groups: Sequence[tuple[str, int]],
    configs: Sequence[Mapping[str, Any]],
    floor_events: Sequence[FloorEvent],
    gpu: str | None,
    check_enabled: bool = True,
    ignore: Sequence[str] = (),
    measured: GpuCeilings | None = None,
) -> JobDiagnosis:
    """Diagnoses of a finished job (with ``diagnose``) and the floors for its rows (always).

    ``report_path`` is the backend's ncu report, or None for backends without one; it is
    read only with ``diagnose``. The floor's peak is the report's own where it carries the
    diagnose metrics, else the datasheet table's.
    """
    notes: list[str] = []
    inputs: dict[tuple[str, int], GroupInputs] = {}
    if diagnose and report_path is not None and report_path.exists():
        try:
            inputs = read_diagnose_inputs(report_path, ignore)
        except (NsightCoreError, ImportError) as exc:
            notes.append(f"diagnose could not read the report: {exc}")
    if measured is not None:  # what this GPU reached: the floor and % of peak read against it
        measured_at = measured_peak(measured)
        peak: Peak | None = measured_at
        inputs = {
            k: dataclasses.replace(
                g,
                runs={
                    i: dataclasses.replace(r, dram_peak_bps=measured.stream_bytes_per_s)
                    for i, r in g.runs.items()
                },
            )
            for k, g in inputs.items()
        }
        notes.append(
            f"peak DRAM bandwidth {measured.stream_bytes_per_s / 1e12:.3g} TB/s ({measured_at.source})"
        )
    else:
        peak = report_peak(inputs) or table_peak(gpu)
    floors = floors_of(floor_events, peak)
    notes += floor_notes(floors, gpu, check_enabled)
    diagnoses = (
        diagnose_groups(
            groups, configs, inputs, floors, backend_has_counters=report_path is not None
        )
        if diagnose
        else []
    )
    return JobDiagnosis(diagnoses, floors, notes)


__all__ = [
    "Floor",
    "GroupInputs",
    "JobDiagnosis",
    "Peak",
    "RunSol",
    "apply_floor",
    "classify",
    "diagnose_group",
    "diagnose_groups",
    "diagnose_run",
    "fold_kernels",
    "median_sol",
    "table_peak",
]
