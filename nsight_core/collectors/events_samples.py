"""The events backend's parent side: the judge's samples of a call, the records read from them.

These run in the judge and the server and read only what the contestant reported (a call's
time, and its host-inclusive latency when asked). The contestant's side (the device, the
stream hold, the checked window) stays in `collectors.events`, where the integrity watch
covers it; `EventsBackend`, the parent's interface, is here and registered there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from nsight_core.collectors.base import Backend, HostFacts, Records, Timing, Wrapped, refused_run
from nsight_core.collectors.extract import KernelRecord
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.host.report import BackendStatus
from nsight_core.plan.config import EngineConfig
from nsight_core.protocol import EVENTS_METRIC, RunKey, SampleEvent
from nsight_core.request import DEFAULT_METRIC
from nsight_core.results import Failure
from nsight_core.settings import JobSettings

EVENTS_LATENCY = "events__host_latency"
"""The events backend's second metric (on request): what a caller pays for one call, ns. On
torch's CUDA device the host's launch path (the call's own host time) plus its GPU window:
the stream hold keeps the two apart, so this is the latency of the call were its launches
and its kernels not to overlap, an upper bound; on a CPU the call's time itself. Not
measured for cupy arguments."""
EVENTS_METRICS = (EVENTS_METRIC, EVENTS_LATENCY)


EVENTS_KERNEL = "call"
"""Kernel name of events-backend records: the sample times the whole call, not a kernel."""


def records_from_samples(samples: Sequence[SampleEvent]) -> Records:
    """Raw samples as records; a duplicate (key, metric) is refused, not averaged."""
    seen: set[tuple[RunKey, str]] = set()
    records: list[KernelRecord] = []
    failures: list[Failure] = []
    for seq, s in enumerate(samples):
        key = RunKey(s.annotation, s.config_id, s.run)
        if (key, s.metric) in seen:
            failures.append(refused_run(key, "samples"))
            records = [r for r in records if (r.key, r.metric) != (key, s.metric)]
            continue
        seen.add((key, s.metric))
        kernel = s.kernel or EVENTS_KERNEL
        records.append(KernelRecord(key, kernel, kernel, s.metric, s.value, s.unit, seq))
    return Records(records, sorted({r.metric for r in records}), None, failures)


class EventsBackend(Backend):
    """CUDA-event or host-clock time of each call, taken inside the contestant."""

    name = "events"
    evidence = "in_process"
    child_timer = "clock"
    default_metric = EVENTS_METRIC
    any_metric = False
    settings_apply = False
    masks_inputs = True

    def preflight(self, settings: JobSettings, config: EngineConfig) -> None:
        """Time only, as the base says; the host-inclusive latency may be asked for too."""
        if _asked(settings):
            settings = dataclasses.replace(settings, metrics=(EVENTS_METRIC,))
        elif list(settings.metrics) != [DEFAULT_METRIC]:
            raise NsightCoreError(
                ErrorClass.INVALID_REQUEST,
                f"backend 'events' measures {' and '.join(EVENTS_METRICS)} only; got metrics "
                f"{list(settings.metrics)}",
                f"leave `metrics` at its default, name {EVENTS_LATENCY} for the host-inclusive "
                "latency too, or use a backend that reads counters (ncu)",
            )
        super().preflight(settings, config)

    def measures(self, settings: JobSettings) -> list[str]:
        asked = _asked(settings)
        return [m for m in EVENTS_METRICS if m in asked] if asked else [EVENTS_METRIC]

    def timed_samples(self, call: Timing, settings: JobSettings) -> list[SampleEvent]:
        values = {EVENTS_METRIC: call.ns, EVENTS_LATENCY: call.latency_ns}
        return [
            SampleEvent.of(call.key, m, v)
            for m in self.measures(settings)
            if (v := values[m]) is not None
        ]

    def read_records(
        self, wrapped: Wrapped, samples: Sequence[SampleEvent], settings: JobSettings
    ) -> Records:
        return records_from_samples(samples)

    def availability(self, host: HostFacts, fixes: list[str]) -> BackendStatus:
        """events runs anywhere: CUDA events where torch or cupy can make them, else the
        host's clock."""
        have = {f.name for f in host.frameworks if f.installed}
        if host.gpus and have & {"torch", "cupy"}:
            why = "CUDA events around each call (L2 flushed between runs)"
        elif host.gpus:
            why = "host wall-clock timing only: install torch or cupy for CUDA-event timing"
        else:
            why = "host wall-clock timing on CPU (no GPU): for screening and CI, not GPU numbers"
            fixes.append(
                "No NVIDIA GPU is visible to this process: run on a GPU host (nvidia-smi shows "
                "the driver's view; check CUDA_VISIBLE_DEVICES); backend 'events' still works "
                "for CPU screening."
            )
        return BackendStatus(name="events", available=True, reason=why)


def _asked(settings: JobSettings) -> set[str]:
    """The events metrics a request names, when it names only those (else empty)."""
    wanted = set(settings.metrics)
    return wanted if wanted and wanted <= set(EVENTS_METRICS) else set()
