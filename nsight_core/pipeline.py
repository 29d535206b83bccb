"""One profile job, end to end: request -> judge + contestant (under the backend) -> rows.

`run_profile_job` is what the MCP job queue calls; `run_worker` is shared with the `@kernel`
API. Both are synchronous and blocking (the server runs them in a thread); setting
`cancel` kills the job's process group.

A request job starts the judge (judge.py), which starts the contestant wrapped by the
backend; an `@kernel` job starts the contestant's function mode wrapped by the backend
directly (the user's own function, which annotates itself, has no reference to judge).
Statistics are computed in this process, from the report or from raw per-run samples.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Literal

from platformdirs import user_cache_dir

from nsight_core.collectors import get_backend
from nsight_core.collectors.base import Wrapped
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.processes.launch import CONTESTANT_ENV_PREFIX, LaunchPlan
from nsight_core.processes.sandbox import SandboxLimits, landlock_abi, run_sandboxed
from nsight_core.processes.seat import plan_launch
from nsight_core.processes.standby import StandbyKey, StandbyPool
from nsight_core.protocol import (
    EVENTS_FILE,
    JOB_ARTIFACTS,
    JUDGE_DIR,
    NCU_LOG_FILE,
    REPORT_FILE,
    JobSpec,
    StandbySpec,
)
from nsight_core.request import ProfileRequest, named_files, request_workdir
from nsight_core.results import ProfileResult, iso, utc_now
from nsight_core.rows.assemble import assemble_result, refused, with_waits
from nsight_core.rows.runs import EventTail, JobRun, ProgressCallback, read_events
from nsight_core.settings import JobSettings

JUDGE_GRACE_S = 30.0
"""The judge outlives its contestant's limit by this much, to report how it ended."""


CONFINE_ENV = "NSPY_MCP_CONFINE"
"""'1' confines every contestant's file access (Landlock), '0' none; see
`confine_contestant` for the default."""


TRANSPORT_ENV = "NSPY_MCP_TRANSPORT"
"""'host' makes CUDA arrays cross between judge and contestant through host memory instead
of CUDA IPC (for hosts where IPC is unavailable; the judge also falls back by itself)."""


def confine_contestant() -> Literal["on", "off"]:
    """'on'/'off' from NSPY_MCP_CONFINE; by default 'on' wherever the kernel has Landlock,
    under every backend alike. The contestant creates its CUDA context before it confines itself
    (CUDA's first initialisation opens files no allow-list can name in advance; once it is
    up, kernels, IPC and JIT caches work confined: docs/correctness.md)."""
    wanted = os.environ.get(CONFINE_ENV, "").strip()
    if wanted in ("0", "1"):
        return "on" if wanted == "1" else "off"
    return "on" if landlock_abi() > 0 else "off"


def preflight(request: ProfileRequest) -> None:
    """Refuse a request that cannot work here, before anything is queued or started."""
    get_backend(request.backend).preflight(JobSettings.of_request(request))
    check_named_files(request)


def check_named_files(request: ProfileRequest) -> None:
    """Refuse a request whose workdir or named files do not exist, naming each (the
    reference's first): found here, a missing file costs no queue wait and no job start."""
    if request.workdir is not None and not Path(request.workdir).is_dir():
        raise NsightCoreError(
            ErrorClass.INVALID_REQUEST,
            f"workdir {request.workdir!r} is not a directory",
            "pass the absolute path of the directory that holds the candidate files, "
            "or leave workdir unset",
        )
    workdir = request_workdir(request)
    missing = [f for f in named_files(request, workdir) if not f.path.is_file()]
    if not missing:
        return
    listed = "; ".join(f"the {f.role} {f.spec!r}: {str(f.path)!r}" for f in missing)
    where = (
        f"the request's workdir {str(workdir)!r}"
        if request.workdir is not None
        else f"the server's current directory {str(workdir)!r}, since the request sets no workdir"
    )
    raise NsightCoreError(
        ErrorClass.INVALID_REQUEST,
        f"{len(missing)} named file(s) do not exist: {listed}",
        f"relative paths resolve against {where}; name each file by its absolute path, "
        "or set workdir to the folder that holds them",
    )


def run_profile_job(
    request: ProfileRequest,
    job_dir: Path,
    *,
    result_id: str,
    on_progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    gpu: str | None = None,
    standby: StandbyPool | None = None,
) -> ProfileResult:
    """Check and profile `request` in a fresh judge and contestant; never raises for job failures.

    `gpu` (an index or UUID) becomes the job's CUDA_VISIBLE_DEVICES: the one GPU it may use.
    With a `standby` pool the job goes to a judge pre-started for the same settings when
    there is one, and a judge for the next such job is started when this one ends.
    """
    created = iso(utc_now())
    try:
        preflight(request)
    except NsightCoreError as err:
        return refused(err, result_id=result_id, created_at=created)
    job_dir = Path(job_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    workdir = request_workdir(request)
    source_file: Path | None = None
    if request.source is not None:
        source_file = job_dir / "inline_source.py"
        source_file.write_text(request.source, encoding="utf-8")
    job = JobSpec(
        mode="request",
        backend=request.backend,
        request=request,
        workdir=str(workdir),
        source_file=str(source_file) if source_file else None,
        child_timer=get_backend(request.backend).child_timer,
        confine=confine_contestant(),
        cuda_ipc=os.environ.get(TRANSPORT_ENV, "ipc").strip() != "host",
    )
    settings = dataclasses.replace(JobSettings.of_request(request), gpu=gpu)
    waits: dict[str, float] = {}
    run = run_worker(
        job,
        job_dir,
        settings,
        on_progress=on_progress,
        cancel=cancel,
        standby=standby,
        waits=waits,
    )
    result = assemble_result(request, run, result_id=result_id, created_at=created)
    return with_waits(result, waits)


def run_worker(
    job: JobSpec,
    job_dir: Path,
    settings: JobSettings,
    *,
    on_progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    standby: StandbyPool | None = None,
    waits: dict[str, float] | None = None,
) -> JobRun:
    """Run a job's processes in the sandbox and wait for them; never raises for the child.

    `waits` receives the seconds waited before the processes ran, by cause (the standby
    pool's `settle`): they are not the job's run time (`JobRun.wall_s`), and a result
    must say where both went."""
    backend = get_backend(settings.backend)
    job.write(job_dir)
    python = [sys.executable, "-P", "-m"]
    plan: LaunchPlan | None = None
    if job.mode == "request":
        argv = [*python, "nsight_core.judge.boot", str(job_dir)]
        wall = settings.time_limit_s + JUDGE_GRACE_S
        output_dir = job_dir / JUDGE_DIR
        wrapped = Wrapped(argv)
    else:
        wrapped = backend.wrap(
            [*python, "nsight_core.contestant", "--function", str(job_dir)], settings, job_dir
        )
        wrapped = dataclasses.replace(wrapped, tool_version=backend.tool_version())
        argv, wall, output_dir = wrapped.argv, settings.time_limit_s, job_dir
    tail = EventTail(job_dir / EVENTS_FILE, on_progress)
    env = job_env(settings.gpu)
    pool = standby if job.mode == "request" else None  # @kernel jobs always start cold
    key = StandbyKey.of(StandbySpec.of_job(job), env) if pool is not None else None
    _settle(standby, waits)  # also before a job that will not use it: nothing may overlap
    t0 = time.monotonic()
    outcome = None
    if pool is not None and key is not None:
        outcome = pool.run(key, job_dir, wall_s=wall, poll=tail.poll, cancel=cancel)
    if outcome is None:
        if job.mode == "request":
            # The contestant's command, so the judge can start it before its own imports.
            # Without a plan the judge makes the command itself, and reports what failed.
            with contextlib.suppress(Exception):
                plan = plan_launch(StandbySpec.of_job(job), job_dir)
                plan.write(job_dir)
        outcome = run_sandboxed(
            argv,
            cwd=job_dir,
            limits=SandboxLimits(wall_s=wall),
            env=env,
            cancel=cancel,
            poll=tail.poll,
            output_dir=output_dir,
        )
    wall_s = time.monotonic() - t0
    if plan is not None:  # the judge removes it; not if it died before it could
        shutil.rmtree(plan.private, ignore_errors=True)
    if pool is not None and key is not None:
        pool.refill(key)
    tail.poll()
    events = read_events(job_dir / EVENTS_FILE)
    error = outcome.to_error()
    if job.mode == "request":
        end = events.end
        if end is not None:
            wrapped = Wrapped(
                end.command,
                end.tool_version,
                job_dir / REPORT_FILE if (job_dir / REPORT_FILE).exists() else None,
                job_dir / NCU_LOG_FILE,
            )
            if error is None and end.error_class is not None:
                error = NsightCoreError(end.error_class, end.message, end.hint)
    else:
        own = backend.classify_end(outcome, wrapped, settings)
        if own is not None and (error is None or not events.failures):
            error = own
    artifacts = {
        name: str(job_dir / fname)
        for name, fname in JOB_ARTIFACTS.items()
        if (job_dir / fname).exists()
    }
    return JobRun(
        job_dir=job_dir,
        backend=settings.backend,
        wrapped=wrapped,
        outcome=outcome,
        events=events,
        error=error,
        wall_s=wall_s,
        artifacts=artifacts,
    )


def _settle(standby: StandbyPool | None, waits: dict[str, float] | None) -> None:
    """Wait for the pool's standbys to start and released judges to end, noting how long."""
    if standby is None:
        return
    settled = standby.settle()
    if waits is not None:
        waits.update(settled)


def job_env(gpu: str | None) -> dict[str, str]:
    """The environment a job's processes get on top of the allowlist: this package on
    PYTHONPATH, the JIT caches and the GPU (a standby's key holds it: standby.py)."""
    package_root = str(Path(__file__).resolve().parents[1])
    pythonpath = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": pythonpath, **jit_cache_env(), **gpu_env(gpu)}


def gpu_env(gpu: str | None) -> dict[str, str]:
    """The job sees only its GPU; a UUID names it whatever CUDA's device order is."""
    return {} if gpu is None else {"CUDA_VISIBLE_DEVICES": gpu}


def jit_cache_env() -> dict[str, str]:
    """Persistent JIT caches for jobs, whose HOME is a fresh private directory.

    Without them every job would recompile its Triton kernels and re-JIT its PTX (seconds
    per job). Contestants share one set (a caller's own settings win); the judge, which
    computes every expected output, gets caches of its own that no contestant can write,
    so a candidate that plants a compiled kernel under the reference's cache key cannot
    change an expected output in a later job (docs/correctness.md).
    """
    base = Path(user_cache_dir("nspy-mcp"))
    env = {}
    for var, sub in (("TRITON_CACHE_DIR", "triton"), ("CUDA_CACHE_PATH", "cuda")):
        shared = os.environ.get(var) or str(base / sub)
        env[CONTESTANT_ENV_PREFIX + var] = shared
        env[var] = str(base / "judge" / sub)
        # Made now: a confined contestant may write beneath them but create nothing above.
        for d in (shared, env[var]):
            Path(d).mkdir(parents=True, exist_ok=True)
    return env
