"""What bounds each candidate, and how far it is from the limit: `Diagnosis` and the floor.

Two products, both computed in the parent from raw per-run values:

- `diagnose_groups`: one `Diagnosis` per (annotation, config) from ncu's speed-of-light
  metrics (asked for with ``diagnose: true``; see `DIAGNOSE_METRICS`) and ncu's own rule
  results. Kernels of one run are folded (times and bytes add up, percentages are
  time-weighted), runs are summarised by their median, and the bound is read from the two
  speed-of-light percentages with ncu's own 60 % line (`BOUND_PCT`).
- `apply_floor`: on every backend, a time row whose median lies below `FLOOR_FRACTION` of
  the time needed to write the outputs at peak DRAM bandwidth is made `suspicious`. The
  judge measures the bytes (`nbytes_of`, `FloorEvent`); the peak comes from the ncu report
  where there is one, else from `PEAK_DRAM_TABLE` (datasheet numbers, source stated).

Every field of a `Diagnosis` that is null has its reason in ``Why``: nothing is stated
without its evidence. docs/diagnose.md explains each number and when a bound is a guess.

Size: about 800 lines: the speed-of-light metric set, bound classification, headroom, rule
results and the physical floor are one analysis over the same per-run values.
"""

from __future__ import annotations

import fnmatch
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nsight_core.collectors.extract import extract_records
from nsight_core.errors import NsightCoreError
from nsight_core.protocol import EVENTS_METRIC, FloorEvent, RunKey
from nsight_core.request import DEFAULT_METRIC
from nsight_core.results import BoundKind, Diagnosis, Row, RuleFinding, suspected
from nsight_core.rows.stats import ns_per

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

FLOOR_FRACTION = 0.5
"""A time below this fraction of the write floor is flagged. The floor assumes DRAM peak;
outputs small enough to stay in L2 can be written faster (L2 bandwidth is up to about 2x
DRAM's on Hopper), so half the floor is still out of reach for a kernel that writes its
outputs; see docs/diagnose.md."""

RULE_TEXT_CHARS = 300
"""Rule messages are cut here: the agent needs the gist, the report keeps the rest."""

PEAK_DRAM_TABLE: tuple[tuple[str, float], ...] = (
    (r"GH200", 4.9e12),
    (r"H200", 4.8e12),
    (r"H100 NVL", 3.9e12),
    (r"H100 PCIe", 2.0e12),
    (r"H100", 3.35e12),
    (r"B200", 8.0e12),
    (r"A100", 2.039e12),
    (r"L40S", 0.864e12),
    (r"\bL4\b", 0.3e12),
)
"""Peak DRAM bandwidth (bytes/s) by GPU name, first match wins, from NVIDIA's datasheets.
Used only without an ncu report. Where one name covers several memory configurations
(GH200 96/144 GB, A100 40/80 GB) the highest is listed: a higher peak gives a lower floor,
so the check stays conservative."""
PEAK_TABLE_SOURCE = (
    "NVIDIA datasheet peak for {gpu} (PEAK_DRAM_TABLE in nsight_core/rows/diagnose.py)"
)


def diagnose_metrics(requested: Sequence[str]) -> list[str]:
    """The metrics ncu collects with ``diagnose``: the requested ones first, then ours."""
    return list(dict.fromkeys([*requested, *DIAGNOSE_METRICS]))


# -- bytes the judge sees ----------------------------------------------------------------


def nbytes_of(obj: Any) -> int | None:
    """Bytes of every array in ``obj`` (tensors, numpy/cupy arrays, nested containers).

    Duck-typed on ``nbytes`` so this module imports no framework. None when nothing in
    ``obj`` is an array (plain Python values have no meaningful device bytes).
    """
    total, found, stack = 0, False, [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(getattr(item, "nbytes", None), int) and hasattr(item, "shape"):
            total += int(item.nbytes)
            found = True
    return total if found else None


# -- peak bandwidth ----------------------------------------------------------------------


@dataclass(frozen=True)
class Peak:
    """Peak DRAM bandwidth and where it came from."""

    bytes_per_s: float
    source: str


def table_peak(gpu: str | None) -> Peak | None:
    """The datasheet peak for a GPU name ('NVIDIA H200', 'cuda:0 (NVIDIA H200)'); None if
    the name is unknown or the run was on a CPU."""
    if not gpu or gpu.strip().lower() == "cpu":
        return None
    for pattern, peak in PEAK_DRAM_TABLE:
        if re.search(pattern, gpu, re.IGNORECASE):
            return Peak(peak, PEAK_TABLE_SOURCE.format(gpu=gpu))
    return None


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


def _fmt_ns(ns: float) -> str:
    return f"{ns / 1e3:.3g} us" if ns >= 1e3 else f"{ns:.3g} ns"


def floor_reason(row_ns: float, floor: Floor) -> str | None:
    """Why ``row_ns`` is below the write floor, or None when it is not (clearly) below."""
    write = floor.write_ns
    if write is None or floor.peak is None or floor.bytes_out is None:
        return None
    if row_ns >= FLOOR_FRACTION * write:
        return None
    return (
        f"median time {_fmt_ns(row_ns)} is below {FLOOR_FRACTION:g}x the physical floor: "
        f"writing its {_fmt_bytes(floor.bytes_out)} of outputs takes at least "
        f"{_fmt_ns(write)} at {floor.peak.bytes_per_s / 1e12:.3g} TB/s ({floor.peak.source}); "
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
            "(run with diagnose under ncu, or see PEAK_DRAM_TABLE)"
        ]
    return []


# -- ncu's rule results ------------------------------------------------------------------

_SEVERITY = {0: "none", 1: "ok", 2: "optimization", 3: "warning", 4: "error"}
_LINK = re.compile(r"@(url|sass|source|section):([^@]*)@")


def _plain(text: str) -> str:
    """ncu's link markup -> its hypertext ('@url:text:link@' -> 'text', else the last part)."""

    def repl(m: re.Match[str]) -> str:
        parts = m.group(2).split(":")
        return parts[0] if m.group(1) == "url" else parts[-1]

    flat = " ".join(_LINK.sub(repl, text).split())
    return flat if len(flat) <= RULE_TEXT_CHARS else flat[: RULE_TEXT_CHARS - 3] + "..."


def rule_finding(
    name: str, section: str | None, msg_type: int, title: str, message: str, speedup: float | None
) -> RuleFinding:
    """One rule result in our vocabulary (severity by ncu's MsgType, text without links)."""
    return RuleFinding(
        Rule=name,
        Section=section or None,
        Severity=_SEVERITY.get(int(msg_type), "none"),
        Title=_plain(title),
        Text=_plain(message),
        EstimatedSpeedupPct=speedup,
    )


def _rules_of(action: Any) -> list[RuleFinding]:
    out = []
    for r in action.rule_results():
        if not r.has_rule_message():
            continue
        msg = r.rule_message()
        speedup = None
        if r.has_speedup_estimation():
            value = r.speedup_estimation().get("speedup")
            speedup = float(value) if isinstance(value, int | float) else None
        out.append(
            rule_finding(
                str(r.name()),
                str(r.section_identifier()),
                int(msg["type"]),
                str(msg["title"]),
                str(msg["message"]),
                speedup,
            )
        )
    return out


def read_rules(report_path: Path) -> list[list[RuleFinding]]:
    """Rule results per action, in report order (the order `extract_records` numbers)."""
    import ncu_report

    ctx = ncu_report.load_report(str(report_path))
    out: list[list[RuleFinding]] = []
    for rng in ctx:
        for i in range(len(rng)):
            out.append(_rules_of(rng[i]))
    return out


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

    Kernels dropped by the ignore globs are dropped here too, so the diagnosis describes
    the same kernels as the rows.
    """
    report = extract_records(report_path, DIAGNOSE_METRICS)
    rules = read_rules(report_path)
    per_run: dict[RunKey, dict[int, dict[str, float | None]]] = {}
    names: dict[RunKey, dict[int, str]] = {}
    for rec in report.records:
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
            next_step=f"kernel time {_fmt_ns(sol.time_ns)} is under {LAUNCH_FRACTION:g}x the "
            f"host's {_fmt_ns(host_ns)} per call: batch calls, capture a CUDA graph, or fuse "
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
    "DIAGNOSE_METRICS",
    "DIAGNOSE_SECTIONS",
    "Floor",
    "GroupInputs",
    "JobDiagnosis",
    "Peak",
    "RunSol",
    "apply_floor",
    "classify",
    "diagnose_group",
    "diagnose_groups",
    "diagnose_metrics",
    "diagnose_run",
    "fold_kernels",
    "median_sol",
    "nbytes_of",
    "table_peak",
]
