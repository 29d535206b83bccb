"""The contestant's `@kernel` mode: the user's own function, called per (config, run).

The function annotates itself (`nsight_core.annotate`); an in-process timer times each
region and the job's backend turns that into samples, as the judge does for a request's
calls, while under ncu the NVTX ranges say which kernels belong to which region. Only the
user's own process starts such a job, so there is no judge and no candidate to keep apart.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from nsight_core.annotation import RegionTiming, RunContext, set_run_context
from nsight_core.collectors.events import sync_all
from nsight_core.collectors.timers import CallTimer, call_timer
from nsight_core.errors import JobExit
from nsight_core.protocol import (
    EVENTS_FILE,
    JOB_FILE,
    DoneEvent,
    JobSpec,
    ProgressEvent,
    RangeEvent,
    RunKey,
)
from nsight_core.runtime.process import EventWriter, failure_event, seed_all
from nsight_core.settings import JobSettings

RUN_SEED_BASE = 500_000


class _RegionReporter:
    """Writes what each annotated region of the `@kernel` mode gave: its samples (by the
    job's backend, as the judge makes them for a request's calls), its end, its failure."""

    def __init__(self, events: EventWriter, job: JobSpec) -> None:
        from nsight_core.collectors import get_backend  # lazy: every backend, @kernel mode only

        self.events = events
        self.backend = get_backend(job.backend)
        self.settings = JobSettings.from_wire(job.settings) if job.settings is not None else None
        self.reported: set[int] = set()
        """ids of the exceptions already reported inside a region."""

    def on_range(self, key: RunKey, exc: BaseException | None, timing: RegionTiming | None) -> None:
        if exc is not None:
            self.reported.add(id(exc))
        if timing is not None:
            if self.settings is None:
                raise ValueError("an in-process timer's job carries its settings")
            ns, kernels = timing
            for sample in self.backend.call_samples(key, ns, kernels, self.settings):
                self.events.emit(sample)
        self.events.emit(
            RangeEvent(
                annotation=key.annotation, config_id=key.config_id, run=key.run, ok=exc is None
            )
        )
        if exc is not None:
            self.events.emit(
                failure_event(key.annotation, "profile", exc, config_id=key.config_id, run=key.run)
            )


def run_function_job(job: JobSpec, events: EventWriter, timer: CallTimer) -> int:
    """Call the user's function per (config, run); it annotates itself. An in-process
    ``timer`` times each region and its backend turns that into samples, as the judge does
    for a request's calls; an external one (ncu) reads the NVTX ranges instead."""
    import cloudpickle

    assert job.function is not None
    spec = job.function
    timed = not timer.external
    phase_seconds: dict[str, float] = {}
    # The pickle holds the function and its bound configs: config values may be any
    # picklable object (tuples, tensors' shapes, dataclasses), not only JSON.
    fn, configs = cloudpickle.loads((Path(job.workdir) / spec.pickle_file).read_bytes())

    reporter = _RegionReporter(events, job)
    on_range, reported = reporter.on_range, reporter.reported

    t0 = time.monotonic()
    for cid, (args, kwargs) in enumerate(configs):
        for _ in range(spec.warmup):
            set_run_context(RunContext(config_id=cid, run=-1, profiling=False))
            try:
                fn(*args, **kwargs)
                sync_all()
            except Exception as exc:
                events.emit(failure_event("<function>", "warmup", exc, config_id=cid))
    phase_seconds["warmup"] = time.monotonic() - t0
    t0 = time.monotonic()
    total, done = len(configs) * spec.runs, 0
    for cid, (args, kwargs) in enumerate(configs):
        for run in range(spec.runs):
            seed_all(job.seed + RUN_SEED_BASE + run)
            set_run_context(
                RunContext(
                    config_id=cid,
                    run=run,
                    profiling=True,
                    on_range=on_range,
                    sync=None if timed else sync_all,
                    timer=timer.region if timed else None,
                    nvtx=not timed,
                )
            )
            try:
                fn(*args, **kwargs)
                sync_all()
            except Exception as exc:
                # Raised outside any annotation (inside ones are reported by on_range).
                if id(exc) not in reported:
                    events.emit(failure_event("<function>", "profile", exc, config_id=cid, run=run))
            done += 1
            events.emit(
                ProgressEvent(phase="profile", config_id=cid, run=run, done=done, total=total)
            )
    set_run_context(None)
    phase_seconds["profile"] = time.monotonic() - t0
    events.emit(DoneEvent(phase_seconds=phase_seconds, device=None))
    return int(JobExit.OK)


def function_main(job_dir: Path) -> int:
    """The `@kernel` mode: the user's own function, per (config, run)."""
    try:
        job = JobSpec.model_validate_json((job_dir / JOB_FILE).read_text())
    except Exception as exc:
        sys.stderr.write(f"nsight_core.contestant: bad job file: {exc}\n")
        return int(JobExit.BAD_JOB)
    events = EventWriter(job_dir / EVENTS_FILE)
    if job.workdir not in sys.path:
        sys.path.append(job.workdir)
    try:
        from nsight_core.collectors import get_backend  # lazy: every backend, @kernel mode only

        timer = call_timer(get_backend(job.backend).child_timer)
        timer.start()  # nvtx or libcupti loaded now, so no profiled call pays for the import
        return run_function_job(job, events, timer)
    except Exception as exc:
        events.emit(failure_event("<worker>", "profile", exc))
        return int(JobExit.INTERNAL)
