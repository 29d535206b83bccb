"""Read an .ncu-rep into small typed records: one `KernelRecord` per (run, kernel, metric).

Attribution is by identity: every profiled action is assigned to the `RunKey` whose NVTX
start/end range (domain `protocol.NVTX_DOMAIN`) was open when it launched, parsed back from
the range name; one inside several runs' ranges at once belongs to none. In a request job
collectors/ranges.py then checks each range against the calls the judge issued. Report
order is used only to order kernels *within* one run (ncu serialises launches, so report
order is launch order), never to decide which run a kernel belongs to.
This is the fix for Nsight Python's positional chunking (reference §C.2, §G.1).

`ncu_report` is imported inside the functions, so importing this module stays cheap and
works where the reader is not installed.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from nsight_core.collectors.kernel_names import launch_label
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.protocol import NVTX_DOMAIN, RunKey
from nsight_core.request import DEFAULT_METRIC

RANGE_KERNEL = "range"
"""Kernel name of a range-replay result, as Nsight Python names it (reference §G checklist)."""

Workload = Literal["kernel", "range", "graph", "cmdlist", "subgrid", "unknown"]

# Metrics every light report carries whatever was asked for; left out of the default
# selection so that `nspy-mcp report` on a foreign report shows what was measured.
# Metadata ncu adds to every result whatever was requested (seen in the recorded fixtures:
# device and launch attributes, topology masks, theoretical-occupancy limits).
_METADATA_PREFIXES = (
    "device__attribute_",
    "launch__",
    "profiler__",
    "numa__",
    "nvlink__",
    "c2clink__",
    "pcie__",
    "sm__maximum_warps",
    "smsp__maximum_warps",
)


@dataclass(frozen=True)
class KernelRecord:
    """One metric value of one profiled kernel (or range), attributed to its run."""

    key: RunKey
    kernel: str
    """Function name (ncu's FUNCTION name base); 'range' for a range-replay result."""
    demangled: str
    """Full demangled signature; 'range' for a range-replay result."""
    metric: str
    value: float | None
    """None when the report lacks the metric for this action or it is not a number."""
    unit: str
    seq: int = 0
    """Position of the action in the report: launch order within a run, for first/last."""
    launch: str = ""
    """The kernel's grid and block (`kernel_names.launch_label`); for a cupti record of a
    copy (metric `kernel_sets.COPY_METRIC`) its bytes; '' when unknown or a range."""


@dataclass(frozen=True)
class DeviceInfo:
    """Static device attributes from the report (not clocks observed during the run)."""

    display_name: str | None = None
    chip: str | None = None
    compute_capability: str | None = None
    sm_count: int | None = None
    clock_rate_khz: float | None = None
    memory_clock_rate_khz: float | None = None


@dataclass(frozen=True)
class ActionInfo:
    """One profiled result of the report, whether or not it belongs to our NVTX domain."""

    seq: int
    kernel: str
    demangled: str
    workload: Workload
    nvtx_ranges: tuple[str, ...]
    """'domain@name' for start/end ranges, 'domain@name/' for push/pop ranges."""
    key: RunKey | None
    values: dict[str, tuple[float | None, str]] = field(default_factory=dict)
    """metric -> (value, unit)."""
    launch: str = ""
    """Grid and block from the launch attributes every kernel result carries, whatever
    metrics were asked for (`kernel_names.launch_label`); '' for a range or without them."""


@dataclass(frozen=True)
class ExtractedReport:
    """Everything extraction found: records of our runs, per-run kernel lists, the device."""

    path: str
    metrics: tuple[str, ...]
    records: tuple[KernelRecord, ...]
    kernels: Mapping[RunKey, tuple[str, ...]]
    """Kernel names per run in launch order, unfiltered (ignore globs act in aggregate.py)."""
    device: DeviceInfo
    actions: tuple[ActionInfo, ...]
    """Every action of the report, including those outside our domain (key None)."""

    @property
    def foreign(self) -> bool:
        """True when no action carries one of our RunKey ranges (a report made elsewhere)."""
        return all(a.key is None for a in self.actions)


def _workload(action: Any, ncu_report: Any) -> Workload:
    kinds: dict[int, Workload] = {
        ncu_report.IAction.WorkloadType_KERNEL: "kernel",
        ncu_report.IAction.WorkloadType_RANGE: "range",
        ncu_report.IAction.WorkloadType_GRAPH: "graph",
        ncu_report.IAction.WorkloadType_CMDLIST: "cmdlist",
        ncu_report.IAction.WorkloadType_SUBGRID_SCHEDULE: "subgrid",
    }
    return kinds.get(int(action.workload_type()), "unknown")


def _nvtx_ranges(action: Any) -> tuple[str, ...]:
    state = action.nvtx_state()
    if state is None:  # ncu ran without --nvtx
        return ()
    out: list[str] = []
    for dom_id in state.domains():
        dom = state.domain_by_id(dom_id)
        name = dom.name()
        out += [f"{name}@{r}" for r in dom.start_end_ranges()]
        out += [f"{name}@{r}/" for r in dom.push_pop_ranges()]
    return tuple(out)


def _key_of(ranges: Sequence[str], workload: Workload, action_name: str) -> RunKey | None:
    prefix = f"{NVTX_DOMAIN}@"
    names = [r[len(prefix) :] for r in ranges if r.startswith(prefix) and not r.endswith("/")]
    keys = {k for k in (RunKey.from_range_name(n) for n in names) if k is not None}
    if len(keys) > 1:
        # Ranges of several runs at once: the harness never opens them so, so one was forged
        # (collectors/ranges.py names it in a request job); the kernel counts for none.
        return None
    if keys:
        return keys.pop()
    if workload == "range":
        # A range result may name the range instead of carrying it in its NVTX state.
        bare = action_name.removeprefix(prefix).removesuffix("/")
        return RunKey.from_range_name(bare)
    return None


def _number(metric: Any) -> float | None:
    try:
        value = metric.value()
    except Exception:  # the SWIG reader raises plain exceptions for odd kinds
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    out = float(value)
    return out if math.isfinite(out) else None


def _value(action: Any, name: str) -> tuple[float | None, str]:
    metric = action.metric_by_name(name)
    if metric is None:
        return None, ""
    return _number(metric), str(metric.unit() or "")


def _attr(action: Any, name: str) -> Any:
    metric = action.metric_by_name(f"device__attribute_{name}")
    if metric is None:
        return None
    try:
        return metric.value()
    except Exception:
        return None


_GRID = ("launch__grid_dim_x", "launch__grid_dim_y", "launch__grid_dim_z")
_BLOCK = ("launch__block_dim_x", "launch__block_dim_y", "launch__block_dim_z")


def _launch(action: Any, demangled: str) -> str:
    """The kernel's launch as `launch_label` writes it, from ncu's launch attributes."""
    dims = [int(_value(action, name)[0] or 0) for name in (*_GRID, *_BLOCK)]
    return launch_label(dims[:3], dims[3:], demangled)


def _device(action: Any) -> DeviceInfo:
    major, minor = (
        _attr(action, "compute_capability_major"),
        _attr(action, "compute_capability_minor"),
    )
    sms = _attr(action, "multiprocessor_count")
    chip = _attr(action, "chip")
    clock, mem_clock = _attr(action, "clock_rate"), _attr(action, "memory_clock_rate")
    name = _attr(action, "display_name")
    return DeviceInfo(
        display_name=str(name) if name else None,
        chip=str(chip) if chip not in (None, "") else None,
        compute_capability=f"{major}.{minor}" if major is not None and minor is not None else None,
        sm_count=int(sms) if isinstance(sms, int | float) else None,
        clock_rate_khz=float(clock) if isinstance(clock, int | float) else None,
        memory_clock_rate_khz=float(mem_clock) if isinstance(mem_clock, int | float) else None,
    )


def _load(path: Path) -> tuple[Any, Any]:
    try:
        import ncu_report
    except ImportError as exc:
        raise NsightCoreError(
            ErrorClass.PROFILER_ERROR,
            f"cannot read {path}: the ncu_report package is not importable ({exc})",
            "pip install ncu-report",
        ) from exc
    if not path.is_file():
        raise NsightCoreError(
            ErrorClass.PROFILER_ERROR, f"report {path} does not exist", "check the path"
        )
    try:
        ctx = ncu_report.load_report(str(path))
    except Exception as exc:
        raise NsightCoreError(
            ErrorClass.PROFILER_ERROR, f"cannot read report {path}: {exc}"
        ) from exc
    return ncu_report, ctx


WARMUP_REPORT = Path(__file__).parents[1] / "data" / "reader_warmup.ncu-rep"
"""A small report of three ranges recorded on a GPU (tests/data/ncu/range_replay, made by
tools/record_fixtures.py), read once by `warm_report_reader`."""


def warm_report_reader() -> None:
    """Read `WARMUP_REPORT` once, so a server's first result does not pay for importing
    ncu_report and its one-time set-up at the first action it opens (most of a first
    `assemble_result`; docs/sandbox.md has the numbers). A server calls it in its start-up thread; without ncu_report, or with a reader that cannot
    read it, it does nothing (the job's own read reports that)."""
    with contextlib.suppress(Exception):
        extract_records(WARMUP_REPORT)


def _actions(ctx: Any) -> Iterator[Any]:
    for rng in ctx:
        for i in range(len(rng)):
            yield rng[i]


def default_metrics(action_metric_names: Sequence[Sequence[str]]) -> list[str]:
    """Metrics to show when none are named: time first, then everything else measured.

    "Measured" is every metric outside the metadata every report carries (device
    attributes, launch configuration, profiler bookkeeping). A report does not say which
    roll-ups were asked for (ncu stores .avg/.max/.min/.sum of a requested name), so all
    are shown, except the time's own roll-ups beside ``gpu__time_duration.sum``.
    """
    present: list[str] = []
    for names in action_metric_names:
        present += [n for n in names if n not in present]
    measured = sorted(n for n in present if not n.startswith(_METADATA_PREFIXES))
    if DEFAULT_METRIC not in present:
        return measured
    time_base = DEFAULT_METRIC.rsplit(".", 1)[0] + "."
    return [DEFAULT_METRIC, *(n for n in measured if not n.startswith(time_base))]


def extract_records(
    report_path: str | Path, metrics: Sequence[str] | None = None
) -> ExtractedReport:
    """Read every action of the report and attribute it to its run by its NVTX range.

    ``metrics=None`` selects `default_metrics`. An action that lacks a requested metric gets a
    record with value None, so aggregation can say which metric was missing where.
    Raises `NsightCoreError` (PROFILER_ERROR) for a missing, unreadable or empty report.
    """
    path = Path(report_path)
    ncu_report, ctx = _load(path)
    raw = list(_actions(ctx))
    if not raw:
        raise NsightCoreError(
            ErrorClass.PROFILER_ERROR,
            f"{path} holds no profiling results: it is not an ncu report, or an empty one",
            "profile again; if ncu wrote it, read the ncu log",
        )
    wanted = (
        list(metrics)
        if metrics is not None
        else default_metrics([tuple(a.metric_names()) for a in raw])
    )
    actions: list[ActionInfo] = []
    records: list[KernelRecord] = []
    kernels: dict[RunKey, list[str]] = {}
    for seq, act in enumerate(raw):
        workload = _workload(act, ncu_report)
        launch = ""
        if workload == "range":
            kernel = demangled = RANGE_KERNEL
        else:
            kernel = str(act.name())
            demangled = str(act.name(ncu_report.IAction.NameBase_DEMANGLED))
            launch = _launch(act, demangled)
        ranges = _nvtx_ranges(act)
        key = _key_of(ranges, workload, str(act.name()))
        values = {m: _value(act, m) for m in wanted}
        actions.append(ActionInfo(seq, kernel, demangled, workload, ranges, key, values, launch))
        if key is None:
            continue
        kernels.setdefault(key, []).append(kernel)
        records += [
            KernelRecord(key, kernel, demangled, m, value, unit, seq, launch)
            for m, (value, unit) in values.items()
        ]
    return ExtractedReport(
        path=str(path),
        metrics=tuple(wanted),
        records=tuple(records),
        kernels={k: tuple(v) for k, v in kernels.items()},
        device=_device(raw[0]),
        actions=tuple(actions),
    )
