"""The backend interface: what a way of measuring must say, and the registry of them.

A backend decides nine things, and no other module compares backend names:

- whether it can run on this host, why, and the cheapest fix where it cannot
  (`availability`, from the facts `host/probe.py` gathers; `check_environment` and a
  request's default backend read it);
- whether its numbers need GPU performance counters (`reads_counters`): where a host denies
  them, a request that names it is answered by one that needs none
  (`plan/request_defaults.py`), its metric names still checked (`check_metric_names`);
- how the contestant's command is wrapped (`wrap`: under ncu, or not at all);
- how a failed run is classified (`classify_end`: ncu's log, or nothing to add);
- how the records of a run are read (`read_records`: an ncu report, or raw samples);
- which metrics it measures (`measures`, `default_metric`, `settings_apply`);
- its child-side timer (`child_timer`, made in the contestant by `timers.call_timer`): an
  NVTX range that an external profiler reads, or a clock inside the contestant; and the
  judge's side of it (`call_samples`). `evidence` says which of the two the rows can claim;
- the notes its rows call for (`annotate_rows`);
- which rebinding inside the contestant touches its numbers (`timers.tampering_affects`,
  from its timer's `CallTimer.relies_on`): a patched clock it never reads leaves its rows
  standing.

Adding a backend is one module: subclass `Backend`, implement the methods, and `register`
an instance; `collectors/__init__.py` names the module in `BACKENDS` (and its place in
`BACKEND_ORDER`, the preference where a request names none).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from nsight_core.collectors.extract import KernelRecord
from nsight_core.collectors.late import late_work_reason
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.host.report import (
    BackendStatus,
    CounterAccess,
    FrameworkStatus,
    GpuInfo,
    NcuInstall,
    PackageStatus,
)
from nsight_core.plan.config import EngineConfig
from nsight_core.protocol import KernelTiming, LaunchSpec, RunKey, SampleEvent, SuspectEvent
from nsight_core.request import DEFAULT_METRIC
from nsight_core.results import EvidenceKind, Failure, Row
from nsight_core.settings import JobSettings

if TYPE_CHECKING:  # only for annotations: sandbox.py stays out of the import graph here
    from nsight_core.host.ncu_install import NcuDiscovery
    from nsight_core.processes.sandbox import SandboxOutcome

TamperScope = Literal["timer", "none", "all"]
"""What a rebinding inside the contestant puts in doubt (`timers.tampering_affects`): the
numbers of this backend's timer, nothing of this backend's, or every row of the job."""

ChildTimer = Literal["range", "clock", "cupti"]
"""'range': the contestant opens one NVTX range per timed call and an external profiler
measures it; 'clock': the contestant times the call itself (CUDA events or a host clock);
'cupti': the contestant reads CUPTI kernel activity of the call (collectors/cupti.py)."""


@dataclass(frozen=True)
class Wrapped:
    """A command ready to run, and what the backend will read afterwards."""

    argv: list[str]
    tool_version: str | None = None
    """The wrapping tool's version (ncu's), for provenance."""
    report_path: Path | None = None
    log_path: Path | None = None


@dataclass(frozen=True)
class Records:
    """Everything a backend read from one run: per-kernel records and what went wrong."""

    records: list[KernelRecord]
    metrics: list[str]
    """The metrics the records really hold (a requested one may be missing)."""
    gpu: str | None = None
    failures: list[Failure] = field(default_factory=list)
    suspects: list[SuspectEvent] = field(default_factory=list)
    """What reading the records found against rows (ncu: work outside the timed ranges,
    ranges nobody issued); applied as the judge's findings are."""


def refused_run(key: RunKey, twice: str) -> Failure:
    """The failure of a run of which ``twice`` (its samples, or those of some metrics)
    arrived twice: no backend can tell which is the run's own, so the run is refused whole
    rather than averaged."""
    return Failure(
        Annotation=key.annotation,
        ConfigId=key.config_id,
        Run=key.run,
        ErrorClass=ErrorClass.PROFILER_ERROR,
        Error=f"two {twice} arrived for run {key.run}; the run is refused",
    )


@dataclass(frozen=True)
class HostFacts:
    """What the environment probe found (host/probe.py), from which each backend says
    whether it can run here, and what would fix it where it cannot."""

    gpus: list[GpuInfo]
    ncu: list[NcuInstall]
    ncu_report: PackageStatus
    cupti: PackageStatus
    counters: CounterAccess
    frameworks: list[FrameworkStatus]
    found: NcuDiscovery | None = None
    """ncu's discovery: why none is used, in the words the pipeline refuses a job with."""


@dataclass(frozen=True)
class Timing:
    """What the contestant's timer reported of one call it timed (`Backend.call_samples`),
    in one value so that a backend's `Backend.timed_samples` names only what it reads."""

    key: RunKey
    ns: float
    kernels: Sequence[KernelTiming]
    latency_ns: float | None
    """Host-inclusive latency, where the call's time leaves the host out and it was asked."""


NO_GPU = "no NVIDIA GPU visible"


class Backend(ABC):
    """One way of measuring; instances are stateless and shared."""

    name: ClassVar[str]
    evidence: ClassVar[EvidenceKind]
    child_timer: ClassVar[ChildTimer]
    default_metric: ClassVar[str]
    any_metric: ClassVar[bool]
    """True when the request may name any metric (ncu); else only `default_metric`."""
    settings_apply: ClassVar[bool]
    """Whether cache_control, clock_control and replay_mode mean anything here (rows record
    them only then)."""
    holds_profiler: ClassVar[bool] = False
    """Whether a contestant this backend wraps holds its GPU's profiler for as long as it
    lives (ncu): no two such processes may live on one GPU, so the standby pool keeps at
    most one (standby/pool.py) and a job that needs it gets it alone."""
    reads_counters: ClassVar[bool] = False
    """Whether its numbers come from GPU performance counters, which a driver may keep for
    administrators (ERR_NVGPUCTRPERM): where the probe finds them denied, a request naming
    this backend is resolved onto the first that reads none (`request_defaults`)."""
    masks_inputs: ClassVar[bool] = False
    """Whether the judge masks a call's inputs in their slots until the call starts: a
    thread of the contestant could otherwise compute from them before the window opens,
    where only a profiler's view of the whole process would see it (ncu: foreign work;
    cupti: another thread's launches)."""

    def preflight(self, settings: JobSettings, config: EngineConfig) -> None:
        """Refuse settings this backend cannot honour, before anything starts; ``config``
        says which tools this host offers (the ncu to run), as the server that runs the job
        was given them."""
        defaults = ([DEFAULT_METRIC], [self.default_metric])
        if not self.any_metric and list(settings.metrics) not in defaults:
            raise NsightCoreError(
                ErrorClass.INVALID_REQUEST,
                f"backend {self.name!r} measures time only "
                f"({self.default_metric}); got metrics {list(settings.metrics)}",
                "leave `metrics` at its default, or use a backend that reads counters (ncu)",
            )
        if not self.settings_apply and settings.replay_mode != "kernel":
            raise NsightCoreError(
                ErrorClass.INVALID_REQUEST,
                f"replay_mode {settings.replay_mode!r} needs a profiler that replays (ncu); "
                f"backend {self.name!r} times each call once",
                "leave kernels.replay_mode at 'kernel', or use backend 'ncu'",
            )

    def check_metric_names(self, metrics: Sequence[str], config: EngineConfig) -> None:
        """Refuse metric names known to be wrong (invalid_metric), whether or not this backend
        can run here: a request answered by another backend is still told its typos."""
        return None  # the time-only backends' `preflight` names what they take

    def measures(self, settings: JobSettings) -> list[str]:
        """The metric names rows of this job will carry."""
        return list(settings.metrics) if self.any_metric else [self.default_metric]

    def wrap(
        self, argv: Sequence[str], launch: LaunchSpec, out_dir: Path, config: EngineConfig
    ) -> Wrapped:
        """The command that runs ``argv`` measured by this backend (files go to out_dir): here
        ``argv`` itself, as a backend that measures inside the contestant runs it."""
        return Wrapped(list(argv))

    def tool_version(self, command: Sequence[str]) -> str | None:
        """The wrapping tool's version for provenance (ncu's), of the tool that ``command``
        (what `wrap` made) runs; asked for after the command has started, since asking runs
        the tool (off a job's critical path)."""
        return None

    def classify_end(
        self, outcome: SandboxOutcome, wrapped: Wrapped, settings: JobSettings
    ) -> NsightCoreError | None:
        """The backend's own reading of how the run ended; None when it has nothing to add."""
        return None

    def profiler_was_busy(self, job_dir: Path) -> bool:
        """Whether the job failed because another process held its GPU's profiler: then
        it is run once more (pipeline.py) after our own holders are retired."""
        return False

    def call_samples(
        self,
        key: RunKey,
        ns: float | None,
        kernels: Sequence[KernelTiming],
        settings: JobSettings,
        *,
        latency_ns: float | None = None,
    ) -> list[SampleEvent]:
        """The judge's samples of one timed call from what the contestant's timer reported
        (its time, kernels and, where its time leaves the host out, its host-inclusive
        latency); none where a profiler measures (no time), whatever the backend."""
        if ns is None:
            return []
        return self.timed_samples(Timing(key, ns, kernels, latency_ns), settings)

    def timed_samples(self, call: Timing, settings: JobSettings) -> list[SampleEvent]:
        """The samples of a call the contestant timed itself, each backend reading the parts
        of the report it measures: here its in-process time as the backend's metric."""
        return [SampleEvent.of(call.key, self.default_metric, call.ns)]

    def late_work(
        self,
        config_id: int,
        calls: Sequence[tuple[float | None, float | None]],
        parts: Sequence[Mapping[str, float]] = (),
    ) -> str | None:
        """The Reason one annotation's timed calls on one config call for, each ``(time,
        work after the window)`` as its timer reported them (`ReplyMsg.after_ns`), when the
        work after the windows is beyond noise (collectors/late.py); the judge makes that
        annotation's rows suspicious. None when nothing was measured or it is within noise.
        ``parts``: each call's work after the window by where it ran, for the Reason."""
        return late_work_reason(config_id, calls, parts)

    def annotate_rows(self, rows: Sequence[Row]) -> list[Row]:
        """Notes only this backend's numbers call for (cupti: host-bound calls); the rows'
        values and Trust stand."""
        return list(rows)

    @abstractmethod
    def availability(self, host: HostFacts, fixes: list[str]) -> BackendStatus:
        """Whether this backend can run on ``host``, and why (`check_environment` shows it);
        the cheapest fix appended to ``fixes`` where it cannot, or where a warning applies."""

    @abstractmethod
    def read_records(
        self, wrapped: Wrapped, samples: Sequence[SampleEvent], settings: JobSettings
    ) -> Records:
        """The run's per-kernel records, from the backend's files or the reported samples."""


_REGISTRY: dict[str, Backend] = {}


def register(backend: Backend) -> Backend:
    _REGISTRY[backend.name] = backend
    return backend


def get_backend(name: str) -> Backend:
    """The registered backend called ``name``; an invalid_request naming the others if none."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise NsightCoreError(
            ErrorClass.INVALID_REQUEST,
            f"backend {name!r} is not available in this version",
            f"use one of {', '.join(sorted(_REGISTRY))}",
        ) from None
