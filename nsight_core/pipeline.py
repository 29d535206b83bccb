"""One profile job, end to end: request -> sandboxed worker (under ncu) -> rows.

`run_profile_job` is what the MCP job queue and the `@kernel` API call. It is synchronous
and blocking (the server runs it in a thread); setting `cancel` kills the job's process
group. Everything the child says is parsed strictly: an unparsable event line is reported,
never silently dropped, and statistics are computed here, from the ncu report or from raw
per-run samples, never taken from the child.
"""

from __future__ import annotations

import logging
import os
import platform
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import TypeAdapter, ValidationError

import nsight_core
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.protocol import (
    EVENTS_FILE,
    NCU_LOG_FILE,
    REPORT_FILE,
    STDERR_FILE,
    STDOUT_FILE,
    CheckEvent,
    DoneEvent,
    FailureEvent,
    ProgressEvent,
    RangeEvent,
    SampleEvent,
    WorkerEvent,
    WorkerJob,
)
from nsight_core.request import ProfileRequest
from nsight_core.results import Correctness, Failure, ProfileResult, Provenance

if TYPE_CHECKING:  # sandbox.py is imported when a job runs, not when this module loads
    from nsight_core.sandbox import SandboxOutcome

log = logging.getLogger(__name__)

ProgressCallback = Callable[[ProgressEvent], None]

_EVENT = TypeAdapter[WorkerEvent](WorkerEvent)


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def preflight(request: ProfileRequest) -> None:
    """Refuse a request that cannot work here, before anything is queued or started."""
    if request.backend == "cupti":
        raise NsightCoreError(
            ErrorClass.INVALID_REQUEST,
            "the cupti backend is not available in this version",
            "use backend 'ncu' (counters) or 'events' (CUDA-event or host time)",
        )
    if request.workdir is not None and not Path(request.workdir).is_dir():
        raise NsightCoreError(
            ErrorClass.INVALID_REQUEST,
            f"workdir {request.workdir!r} is not a directory",
            "pass the directory that holds the candidate files, or leave workdir unset",
        )
    if request.backend == "ncu":
        from nsight_core.collectors.ncu import find_ncu

        if find_ncu() is None:
            raise NsightCoreError(
                ErrorClass.PROFILER_ERROR,
                "ncu (Nsight Compute CLI) was not found on PATH",
                "install Nsight Compute or set NSPY_NCU to the ncu binary; "
                "or use backend 'events', which needs no profiler",
            )
        _check_metrics(request.metrics)


def _check_metrics(metrics: Sequence[str]) -> None:
    from nsight_core.catalog import validate_metrics

    report = validate_metrics(list(metrics))
    # "unverified" (no catalog for this chip, or a regex) is left to ncu and to the
    # report check in assemble.py; only names known to be wrong stop the job here.
    bad = [m for m in report.metrics if m.status in ("unknown", "needs_suffix")]
    if bad:
        parts = []
        for m in bad:
            names = m.suggestions or m.valid_names
            hint = f" (did you mean {', '.join(names[:3])}?)" if names else ""
            parts.append(f"{m.name}: {m.status}{hint}")
        raise NsightCoreError(
            ErrorClass.INVALID_METRIC,
            "invalid metric name(s): " + "; ".join(parts),
            "call validate_metrics for details; fix the names before profiling",
        )


class EventTail:
    """Reads new complete lines of events.jsonl while the worker runs, for progress."""

    def __init__(self, path: Path, on_progress: ProgressCallback | None) -> None:
        self.path = path
        self.on_progress = on_progress
        self._offset = 0
        self._buf = ""

    def poll(self) -> None:
        if self.on_progress is None or not self.path.exists():
            return
        with self.path.open("r", encoding="utf-8", errors="replace") as fh:
            fh.seek(self._offset)
            chunk = fh.read()
            self._offset = fh.tell()
        self._buf += chunk
        *lines, self._buf = self._buf.split("\n")
        for line in lines:
            if '"type":"progress"' not in line.replace(" ", ""):
                continue
            try:
                ev = _EVENT.validate_json(line)
            except ValidationError:
                continue
            if isinstance(ev, ProgressEvent):
                try:
                    self.on_progress(ev)
                except Exception:  # a progress sink must never break the job
                    log.exception("progress callback failed")


@dataclass
class WorkerEvents:
    """Everything the worker reported, parsed and checked."""

    checks: list[CheckEvent] = field(default_factory=list)
    failures: list[FailureEvent] = field(default_factory=list)
    ranges: list[RangeEvent] = field(default_factory=list)
    samples: list[SampleEvent] = field(default_factory=list)
    done: DoneEvent | None = None
    bad_lines: int = 0


def read_events(path: Path) -> WorkerEvents:
    out = WorkerEvents()
    if not path.exists():
        return out
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            ev = _EVENT.validate_json(line)
        except ValidationError:
            out.bad_lines += 1
            continue
        if isinstance(ev, CheckEvent):
            out.checks.append(ev)
        elif isinstance(ev, FailureEvent):
            out.failures.append(ev)
        elif isinstance(ev, RangeEvent):
            out.ranges.append(ev)
        elif isinstance(ev, SampleEvent):
            out.samples.append(ev)
        elif isinstance(ev, DoneEvent):
            out.done = ev
    return out


def failure_of_event(ev: FailureEvent) -> Failure:
    return Failure(
        Annotation=ev.annotation,
        ConfigId=ev.config_id,
        Run=ev.run,
        Phase=ev.phase,
        ErrorClass=ev.error_class,
        Error=ev.message,
        Traceback=ev.traceback,
        File=ev.file,
        Line=ev.line,
    )


def failure_of_error(err: NsightCoreError, phase: str | None = None) -> Failure:
    return Failure(ErrorClass=err.error_class, Error=err.message, Hint=err.hint, Phase=phase)


def run_profile_job(
    request: ProfileRequest,
    job_dir: Path,
    *,
    result_id: str,
    on_progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
) -> ProfileResult:
    """Check and profile `request` in a fresh sandboxed worker; never raises for job failures."""
    created = utc_now()
    try:
        preflight(request)
    except NsightCoreError as err:
        return ProfileResult(
            result_id=result_id,
            status="failed",
            message=f"{err.error_class}: {err}",
            created_at=created,
            finished_at=utc_now(),
            error=failure_of_error(err, "preflight"),
        )
    job_dir = Path(job_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(request.workdir or os.getcwd()).resolve()
    source_file: Path | None = None
    if request.source is not None:
        source_file = job_dir / "inline_source.py"
        source_file.write_text(request.source, encoding="utf-8")
    job = WorkerJob(
        mode="request",
        backend=request.backend,
        request=request,
        workdir=str(workdir),
        source_file=str(source_file) if source_file else None,
    )
    run = run_worker(
        job,
        job_dir,
        time_limit_s=request.time_limit_s,
        metrics=request.metrics,
        cache_control=request.cache_control,
        clock_control=request.clock_control,
        replay_mode=request.kernels.replay_mode,
        on_progress=on_progress,
        cancel=cancel,
    )
    from nsight_core.assemble import assemble_result

    return assemble_result(request, run, result_id=result_id, created_at=created)


@dataclass
class WorkerRun:
    """A finished worker process: how it ended, what it said, where its files are."""

    job_dir: Path
    backend: str
    command: list[str]
    outcome: SandboxOutcome
    events: WorkerEvents
    error: NsightCoreError | None
    report_path: Path | None
    ncu_version: str | None
    wall_s: float
    artifacts: dict[str, str]


def run_worker(
    job: WorkerJob,
    job_dir: Path,
    *,
    time_limit_s: float,
    metrics: Sequence[str],
    cache_control: str,
    clock_control: str,
    replay_mode: str,
    on_progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
) -> WorkerRun:
    """Start the worker (under ncu for that backend) in the sandbox and wait for it."""
    from nsight_core.sandbox import SandboxLimits, run_sandboxed

    job.write(job_dir)
    worker_argv = [sys.executable, "-m", "nsight_core.worker", str(job_dir)]
    report_path = job_dir / REPORT_FILE
    log_path = job_dir / NCU_LOG_FILE
    ncu_ver: str | None = None
    argv = worker_argv
    if job.backend == "ncu":
        from nsight_core.collectors.ncu import build_ncu_command, find_ncu, ncu_version

        ncu = find_ncu()
        if ncu is None:
            raise NsightCoreError(ErrorClass.PROFILER_ERROR, "ncu not found on PATH")
        ncu_ver = ncu_version(ncu)
        argv = build_ncu_command(
            ncu,
            metrics=metrics,
            cache_control=cache_control,
            clock_control=clock_control,
            replay_mode=replay_mode,
            report_path=report_path,
            log_path=log_path,
            target_argv=worker_argv,
        )
    tail = EventTail(job_dir / EVENTS_FILE, on_progress)
    package_root = str(Path(nsight_core.__file__).resolve().parents[1])
    pythonpath = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)
    t0 = time.monotonic()
    outcome = run_sandboxed(
        argv,
        cwd=job_dir,
        limits=SandboxLimits(wall_s=time_limit_s),
        env={"PYTHONPATH": pythonpath, **jit_cache_env()},
        cancel=cancel,
        poll=tail.poll,
        output_dir=job_dir,
    )
    wall = time.monotonic() - t0
    tail.poll()
    events = read_events(job_dir / EVENTS_FILE)
    error: NsightCoreError | None = None
    if outcome.error_class is not None:
        error = NsightCoreError(outcome.error_class, outcome.message, outcome.hint)
    if job.backend == "ncu" and outcome.error_class not in (
        ErrorClass.CANCELLED,
        ErrorClass.TIMEOUT,
    ):
        from nsight_core.collectors.ncu import classify_ncu_failure

        log_text = log_path.read_text(errors="replace") if log_path.exists() else ""
        ncu_err = classify_ncu_failure(
            outcome.exit_code, log_text, report_path.exists(), metrics=metrics
        )
        if ncu_err is not None and (error is None or not events.failures):
            error = ncu_err
    artifacts = {
        name: str(job_dir / fname)
        for name, fname in (
            ("events", EVENTS_FILE),
            ("report", REPORT_FILE),
            ("ncu_log", NCU_LOG_FILE),
            ("stdout", STDOUT_FILE),
            ("stderr", STDERR_FILE),
        )
        if (job_dir / fname).exists()
    }
    return WorkerRun(
        job_dir=job_dir,
        backend=job.backend,
        command=list(argv),
        outcome=outcome,
        events=events,
        error=error,
        report_path=report_path if report_path.exists() else None,
        ncu_version=ncu_ver,
        wall_s=wall,
        artifacts=artifacts,
    )


def jit_cache_env() -> dict[str, str]:
    """Persistent JIT caches for jobs, whose HOME is a fresh private directory.

    Without them every job would recompile its Triton kernels and re-JIT its PTX (seconds
    per job); the caches hold compiler output only, keyed by source and options, so
    sharing them between jobs cannot change a result. A caller's own settings win.
    """
    from platformdirs import user_cache_dir

    base = Path(user_cache_dir("nspy-mcp"))
    env = {}
    for var, sub in (("TRITON_CACHE_DIR", "triton"), ("CUDA_CACHE_PATH", "cuda")):
        env[var] = os.environ.get(var) or str(base / sub)
    return env


def provenance_of(
    run: WorkerRun, *, gpu: str | None, settings: dict[str, str | None]
) -> Provenance:
    from importlib.metadata import PackageNotFoundError, version

    try:
        reader = version("ncu-report")
    except PackageNotFoundError:
        reader = None
    done = run.events.done
    return Provenance(
        backend=run.backend,
        gpu=gpu or (done.device if done else None),
        ncu_version=run.ncu_version,
        ncu_report_version=reader,
        nspy_version=_nspy_version(),
        python=platform.python_version(),
        host=socket.gethostname(),
        cache_control=settings.get("cache_control"),
        clock_control=settings.get("clock_control"),
        replay_mode=settings.get("replay_mode"),
        command=run.command,
        phase_seconds=dict(done.phase_seconds) if done else {},
        wall_seconds=round(run.wall_s, 3),
    )


def _nspy_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nspy-mcp")
    except PackageNotFoundError:
        return "0.0.0+unknown"


def correctness_of(request: ProfileRequest, checks: Sequence[CheckEvent]) -> list[Correctness]:
    return [
        Correctness(
            Annotation=c.annotation,
            ConfigId=c.config_id,
            Params=request.configs[c.config_id] if c.config_id < len(request.configs) else {},
            Passed=c.passed,
            Seeds=c.seeds,
            MaxAbsError=c.max_abs_error,
            MaxRelError=c.max_rel_error,
            MismatchCount=c.mismatch_count,
            FirstBadIndex=c.first_bad_index,
            Reasons=c.reasons,
            ErrorClass=c.error_class,
            Error=c.message,
        )
        for c in checks
    ]
