"""The judge's readings of its GPU around each timed call: SM clock, temperature, reasons.

An in-process timer (events, cupti) times a call at whatever clock the GPU runs then: a
GPU that heats up, hits its power cap or is slowed by another tenant makes the same kernel
slower from one run to the next, for reasons that are the host's, not the candidate's. So
the judge reads NVML right before it sends each timed call and right after the reply comes
back, and the rows say when the clock moved (rows/gpu_state.py).

Why the judge: it is the trusted process and sits on the job's GPU, so candidate code never
touches the numbers and the contestant needs no change. One NVML handle per job, opened
before the job where the judge is pre-started; a reading is three NVML queries, and what
they cost goes into the judge's own time (``judge`` and, apart, ``nvml`` in the job's
``phase_seconds``). Untimed calls are not read.

Why not under ncu: ncu replays each kernel (or range) several times, saving and restoring
memory between passes, and controls the clocks itself where ``clock_control`` asks it to;
the judge's readings around a call under replay would describe those passes, not the one
ncu's numbers come from. A clock ncu measured belongs in the report: ask ncu for
``sm__cycles_elapsed.avg.per_second`` (the SM clock over each kernel). So only backends
whose evidence is ``in_process`` are read.

Without NVML (no nvidia-ml-py, no driver, no permission, a CPU job) nothing is read and the
job carries one note saying why; a reading that fails is null and noted once, never an error.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nsight_core.host.thermal import clock_event_reasons, nvml_handle
from nsight_core.protocol import GpuStateEvent, RunKey
from nsight_core.results import EvidenceKind


@dataclass(frozen=True)
class Reading:
    """One look at the GPU: SM clock (MHz), temperature (C), active clock-event reasons."""

    sm_mhz: int | None
    temp_c: int | None
    reasons: tuple[str, ...] = ()


Reader = Callable[[], Reading]

NOT_READ = "the GPU's SM clock and temperature were not recorded"
"""How the job's note starts when no reading was taken (rows/gpu_state.py's docs say why)."""


def nvml_state_reader(device: int | None = None) -> tuple[Reader | None, str]:
    """A reader of the CUDA device ``device`` (None: the current one), or None and why not.

    The handle is opened once, here; each call of the reader only queries it."""
    found = nvml_handle(device)
    if isinstance(found, str):
        return None, found
    pynvml, handle = found

    def query(fn: Callable[..., Any], what: int) -> int | None:
        # Each query may fail alone (a MIG slice has no temperature): its value is null.
        try:
            return int(fn(handle, what))
        except Exception:
            return None

    def read() -> Reading:
        return Reading(
            query(pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_SM),
            query(pynvml.nvmlDeviceGetTemperature, pynvml.NVML_TEMPERATURE_GPU),
            clock_event_reasons(pynvml, handle),
        )

    first = read()
    if first.sm_mhz is None and first.temp_c is None:
        return None, "NVML reads neither the SM clock nor the temperature of this GPU"
    return read, ""


class GpuSampler:
    """One job's readings: `start` before a timed call is sent, `stop` after its reply,
    `take` the event for that call once the judge knows the call counts."""

    def __init__(self, reader: Reader | None, why: str = "", *, wanted: bool = True) -> None:
        self._reader = reader
        self._why = why
        self._wanted = wanted
        """False where the backend's numbers are not read at all (ncu): no note then."""
        self._key: RunKey | None = None
        self._start: Reading | None = None
        self._end: Reading | None = None
        self._on_cpu = False
        self._failed: str | None = None
        self.spent_s = 0.0
        """Seconds spent reading NVML: part of the judge's own time."""
        self.readings = 0

    @classmethod
    def for_backend(cls, evidence: EvidenceKind) -> GpuSampler:
        """A sampler for a job whose numbers come from ``evidence``: reading only where the
        timer is in-process (the module docstring says why not under ncu)."""
        if evidence != "in_process":
            return cls(None, wanted=False)
        reader, why = nvml_state_reader()
        return cls(reader, why)

    def start(self, key: RunKey, device: str | None) -> None:
        """Read before the timed call ``key`` goes out (``device``: where the contestant's
        calls run, as it reported; a CPU job's GPU says nothing about its times)."""
        self._key, self._start, self._end = None, None, None
        if device is not None and device.startswith("cpu"):
            self._on_cpu = True
            return
        if self._reader is not None:
            self._key, self._start = key, self._read()

    def stop(self) -> None:
        """Read once the reply to the call `start` was given has arrived."""
        if self._key is not None:
            self._end = self._read()

    def take(self, key: RunKey) -> list[GpuStateEvent]:
        """The readings around ``key`` as an event ([] where none were taken for it)."""
        start, end = self._start, self._end
        if self._key != key or start is None or end is None:
            return []
        self._key = None
        return [
            GpuStateEvent(
                annotation=key.annotation,
                config_id=key.config_id,
                run=key.run,
                sm_mhz=[start.sm_mhz, end.sm_mhz],
                temp_c=[start.temp_c, end.temp_c],
                reasons=[list(start.reasons), list(end.reasons)],
            )
        ]

    def notes(self) -> list[str]:
        """At most one note for the job: why nothing (or not everything) was read."""
        if not self._wanted:
            return []
        if self._on_cpu and not self.readings:
            return [f"{NOT_READ}: the calls ran on the CPU"]
        if self._why:
            return [f"{NOT_READ}: {self._why}"]
        if self._failed:
            return [f"an NVML reading of the GPU failed, its values are null: {self._failed}"]
        return []

    def _read(self) -> Reading:
        assert self._reader is not None
        t0 = time.perf_counter()
        try:
            got = self._reader()
        except Exception as exc:  # a driver hiccup costs this reading, never the job
            got = Reading(None, None)
            self._failed = self._failed or str(exc)[:200]
        self.spent_s += time.perf_counter() - t0
        self.readings += 1
        return got
