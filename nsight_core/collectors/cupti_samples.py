"""The parent side of a cupti measurement: the judge's samples of a call, the records read
from them, and the host-bound note on rows.

These run in the judge and the server, never in the contestant, and read only what the
contestant reported (`KernelTiming`s and a latency): one `cupti__time_duration.sum` sample
per kernel, named and with its launch, plus the call's union span of kernel time and its
host-inclusive latency; and one `kernel_sets.COPY_METRIC` sample per kind and size of the
call's copies and memsets, which no value counts but its kernel set does.
`records_from_cupti_samples` attributes them to the run, so `reduce_runs` folds the
per-kernel samples with `kernels.combine` and `kernels.ignore` as it folds ncu's records.
The contestant's side (the timer, attribution by launch) stays in `collectors.cupti` and
`collectors.cupti_records`, where the integrity watch covers it; `CuptiBackend`, the
parent's interface, is here and registered there.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import sys
from collections.abc import Sequence
from typing import Literal, Protocol

from nsight_core.collectors.base import (
    NO_GPU,
    Backend,
    HostFacts,
    Records,
    Timing,
    Wrapped,
    refused_run,
)
from nsight_core.collectors.extract import KernelRecord
from nsight_core.collectors.kernel_sets import COPY_METRIC
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.host.report import BackendStatus
from nsight_core.plan.config import EngineConfig
from nsight_core.protocol import RunKey, SampleEvent
from nsight_core.results import Failure, Row, marked
from nsight_core.settings import JobSettings

CUPTI_DURATION = "cupti__time_duration.sum"
"""One kernel's duration (end - start of its activity record), ns; folded per call by
``kernels.combine`` like ncu's gpu__time_duration.sum."""
CUPTI_SPAN = "cupti__kernel_span"
"""Union of the (not ignored) kernels' [start, end] intervals of one call, ns: device time
with overlap counted once, whatever ``combine`` says."""
CUPTI_LATENCY = "cupti__call_latency"
"""Host-inclusive time of one call, ns: launch overhead, Python and GPU work, up to the end
of the synchronization after it (L2 flush excluded)."""
CUPTI_METRICS = (CUPTI_DURATION, CUPTI_SPAN, CUPTI_LATENCY)


class KernelLike(Protocol):
    """What `call_samples` reads of a kernel: `KernelSpan` here, the reply's model there."""

    @property
    def name(self) -> str: ...
    @property
    def start_ns(self) -> int: ...
    @property
    def end_ns(self) -> int: ...
    @property
    def stream(self) -> int: ...
    @property
    def launch(self) -> str: ...
    @property
    def kind(self) -> Literal["kernel", "copy"]: ...


def union_ns(intervals: Sequence[tuple[int, int]]) -> int:
    """Total length of the union of [start, end] intervals: concurrent kernels count once."""
    total, cur_start, cur_end = 0, None, None
    for start, end in sorted(intervals):
        if cur_end is None or cur_start is None or start > cur_end:
            if cur_end is not None and cur_start is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None and cur_start is not None:
        total += cur_end - cur_start
    return total


def call_samples(
    key: RunKey,
    latency_ns: float,
    kernels: Sequence[KernelLike],
    ignore: Sequence[str] = (),
) -> list[SampleEvent]:
    """The judge's samples for one timed call: one duration per kernel, then the span of
    the kernels the ignore globs keep, then the call's latency; then its copies."""

    def sample(metric: str, value: float, kernel: str | None = None) -> SampleEvent:
        return SampleEvent.of(key, metric, value, kernel)

    calls = [k for k in kernels if k.kind != "copy"]
    out = [
        SampleEvent.of(key, CUPTI_DURATION, float(k.end_ns - k.start_ns), k.name).model_copy(
            update={"launch": k.launch or None}
        )
        for k in calls
    ]
    kept = [k for k in calls if not any(fnmatch.fnmatchcase(k.name, p) for p in ignore)]
    if kept:
        out.append(sample(CUPTI_SPAN, float(union_ns([(k.start_ns, k.end_ns) for k in kept]))))
    out.append(sample(CUPTI_LATENCY, float(latency_ns)))
    out += [
        SampleEvent.of(key, COPY_METRIC, 0.0, k.name).model_copy(
            update={"unit": "", "launch": k.launch or None}
        )
        for k in kernels
        if k.kind == "copy"
    ]
    return out


def records_from_cupti_samples(samples: Sequence[SampleEvent], ignore: Sequence[str]) -> Records:
    """Per-kernel samples -> records, one launch (``seq``) per kernel sample.

    A per-call sample (span, latency: no kernel name) is filed under the call's first kernel
    that the ignore globs keep, so it adds no launch to the run's kernel count and survives
    the same globs; a call without kernels files none (the run is then 'no_kernels', as
    under ncu). Two per-call samples of one metric for a run refuse the run. A copy's
    sample becomes a record of `COPY_METRIC`, which reduction keeps out of the launches.
    """
    by_run: dict[RunKey, list[tuple[int, SampleEvent]]] = {}
    for seq, s in enumerate(samples):
        by_run.setdefault(RunKey(s.annotation, s.config_id, s.run), []).append((seq, s))
    records: list[KernelRecord] = []
    failures: list[Failure] = []
    for key, items in by_run.items():
        copies = [(seq, s) for seq, s in items if s.metric == COPY_METRIC]
        items = [(seq, s) for seq, s in items if s.metric != COPY_METRIC]
        launches = [(seq, s) for seq, s in items if s.kernel is not None]
        kept = [
            (seq, s)
            for seq, s in launches
            if not any(fnmatch.fnmatchcase(s.kernel or "", p) for p in ignore)
        ]
        anchor = (kept or launches)[0] if launches else None
        per_call = [s for _seq, s in items if s.kernel is None]
        metrics = [s.metric for s in per_call]
        twice = sorted({m for m in metrics if metrics.count(m) > 1})
        if twice:
            failures.append(refused_run(key, f"{', '.join(twice)} samples"))
            continue
        for seq, s in [*launches, *copies]:
            name = s.kernel or ""
            records.append(
                KernelRecord(key, name, name, s.metric, s.value, s.unit, seq, s.launch or "")
            )
        if anchor is not None:
            seq, first = anchor
            name = first.kernel or ""
            records += [
                KernelRecord(key, name, name, s.metric, s.value, s.unit, seq) for s in per_call
            ]
    return Records(records, list(CUPTI_METRICS), None, failures)


HOST_BOUND_RATIO = 5.0
"""A call is host-bound when its latency is more than this many times its kernel time..."""
HOST_BOUND_MIN_NS = 50_000.0
"""... and more than this (50 us) in all: a 10 us launch on a 1 us kernel is no news. A
library call on small shapes pays more in its Python launch path than in its kernels (a
Triton launcher above all) and is host-bound; a large one is not (docs/stages.md)."""


def host_bound_reason(device_ns: float | None, latency_ns: float | None) -> str | None:
    """The Reason for a host-bound call (medians of one annotation and config), or None."""
    if device_ns is None or latency_ns is None or device_ns < 0:
        return None
    if latency_ns <= HOST_BOUND_MIN_NS or latency_ns <= HOST_BOUND_RATIO * device_ns:
        return None
    times = f"{latency_ns / device_ns:.1f}x" if device_ns > 0 else "far more than"
    return (
        f"host-bound calls: the call's host-inclusive latency ({CUPTI_LATENCY}, median "
        f"{latency_ns / 1e3:.3g} us) is {times} its kernel time ({device_ns / 1e3:.3g} us; "
        f"flagged above {HOST_BOUND_RATIO:g}x and {HOST_BOUND_MIN_NS / 1e3:g} us): launch and "
        "Python overhead dominate what a caller pays, and kernel time (cupti's or ncu's) "
        "understates it. Compare kernels by kernel time; to make calls cheaper, launch less "
        "(fused kernels, CUDA graphs, a lighter launcher)"
    )


def flag_host_bound(rows: Sequence[Row]) -> list[Row]:
    """cupti rows of host-bound calls get the reason on their kernel-time and latency rows.

    Per (annotation, config, stage): kernel time is the `cupti__time_duration.sum` row's
    median (the `cupti__kernel_span` row's when that one has no value, e.g. several kernels
    under combine 'none'). A note, not a verdict: the numbers stand, Trust is unchanged.
    Rows of other backends pass through untouched (they carry no cupti metrics).
    """
    medians: dict[tuple[str, int, str | None], dict[str, float | None]] = {}
    for r in rows:
        if r.Metric in CUPTI_METRICS:
            medians.setdefault((r.Annotation, r.ConfigId, r.Stage), {})[r.Metric] = r.MedianValue
    reasons: dict[tuple[str, int, str | None], str] = {}
    for group, m in medians.items():
        device = m.get(CUPTI_DURATION)
        reason = host_bound_reason(
            device if device is not None else m.get(CUPTI_SPAN), m.get(CUPTI_LATENCY)
        )
        if reason is not None:
            reasons[group] = reason
    out = []
    for r in rows:
        reason = reasons.get((r.Annotation, r.ConfigId, r.Stage))
        if reason is not None and r.Metric in (CUPTI_DURATION, CUPTI_LATENCY):
            r = marked(r, reason)
        out.append(r)
    return out


CUPTI_INSTALL_HINT = (
    "install cupti-python in the server's Python environment: pip install 'nspy-mcp[cupti]' "
    "(13.0.x for CUDA 13.0 drivers, 12.8.0 for CUDA 12 drivers); check_environment says "
    "which fits; meanwhile use backend 'events' (or 'ncu' where counters are allowed)"
)


class CuptiBackend(Backend):
    """CUPTI kernel activity of each call, read inside the contestant."""

    name = "cupti"
    evidence = "in_process"
    child_timer = "cupti"
    default_metric = CUPTI_DURATION
    any_metric = False
    settings_apply = False

    def preflight(self, settings: JobSettings, config: EngineConfig) -> None:
        """Time-only settings (the base checks), then cupti-python present and fitting."""
        super().preflight(settings, config)
        if importlib.util.find_spec("cupti") is None:
            raise NsightCoreError(
                ErrorClass.INVALID_REQUEST,
                "backend 'cupti' needs cupti-python, which is not installed in the Python "
                f"that runs contestants ({sys.executable})",
                CUPTI_INSTALL_HINT,
            )
        from nsight_core.host.probe import probe_environment  # lazy: server side only

        status = probe_environment(config).backend("cupti")
        if not status.available:
            raise NsightCoreError(
                ErrorClass.NO_GPU
                if "no NVIDIA GPU" in status.reason
                else ErrorClass.INVALID_REQUEST,
                f"backend 'cupti' cannot run here: {status.reason}",
                CUPTI_INSTALL_HINT,
            )

    def measures(self, settings: JobSettings) -> list[str]:
        return list(CUPTI_METRICS)

    def annotate_rows(self, rows: Sequence[Row]) -> list[Row]:
        return flag_host_bound(rows)  # latency far above kernel time

    def timed_samples(self, call: Timing, settings: JobSettings) -> list[SampleEvent]:
        # Its time is already host-inclusive (cupti__call_latency): latency_ns is never set.
        return call_samples(call.key, call.ns, call.kernels, settings.kernels.ignore)

    def read_records(
        self, wrapped: Wrapped, samples: Sequence[SampleEvent], settings: JobSettings
    ) -> Records:
        return records_from_cupti_samples(samples, settings.kernels.ignore)

    def availability(self, host: HostFacts, fixes: list[str]) -> BackendStatus:
        """cupti runs with a GPU and a cupti-python that fits the driver."""
        cupti = host.cupti
        if not host.gpus:
            missing = "" if cupti.installed else "; cupti-python not installed"
            return BackendStatus(name="cupti", available=False, reason=NO_GPU + missing)
        if not cupti.installed or cupti.compatible is False:
            fixes.append(f"For backend 'cupti': {cupti.note}.")
            return BackendStatus(
                name="cupti", available=False, reason=f"cupti-python: {cupti.note}"
            )
        return BackendStatus(
            name="cupti", available=True, reason=f"cupti-python {cupti.version}: {cupti.note}"
        )
