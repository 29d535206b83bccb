"""One profile job, end to end: request -> judge + contestant (under the backend) -> rows.

`run_profile_job` is what the MCP job queue calls: it resolves the request into a `JobPlan`
(plan/job_plan.py) and runs it (`run_planned`); `run_worker` runs an `@kernel` function
job. Both are synchronous and blocking (the server runs them in a thread); setting
`cancel` kills the job's process group.

A request job starts the judge (judge/), which starts the contestant wrapped by the
backend; an `@kernel` job starts the contestant's function mode wrapped by the backend
directly (the user's own function, which annotates itself, has no reference to judge).
Statistics are computed in this process, from the report or from raw per-run samples.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from nsight_core.collectors import get_backend
from nsight_core.collectors.base import Wrapped
from nsight_core.collectors.ranges import CALLS_FILE
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.host.ceilings import for_job
from nsight_core.host.contention import TenantWatch, host_load
from nsight_core.plan.admit import Admitted
from nsight_core.plan.config import EngineConfig
from nsight_core.plan.job_plan import JobPlan, job_env, plan_job
from nsight_core.plan.request_defaults import resolve_defaults
from nsight_core.processes.in_flight import killed_in_flight
from nsight_core.processes.sandbox import (
    SandboxLimits,
    SandboxOutcome,
    default_memory_limit,
    run_sandboxed,
)
from nsight_core.protocol import (
    EVENTS_FILE,
    JOB_ARTIFACTS,
    JUDGE_DIR,
    NCU_LOG_FILE,
    REPORT_FILE,
    FailureEvent,
    JobSpec,
)
from nsight_core.request import (
    ProfileRequest,
    candidates_sharing_trusted_modules,
    named_files,
    request_workdir,
)
from nsight_core.results import ProfileResult, iso, utc_now
from nsight_core.rows.assemble import assemble_result, refused, with_waits
from nsight_core.rows.run_values import refuse_summed_rates
from nsight_core.rows.runs import EventTail, JobRun, ProgressCallback, read_events
from nsight_core.settings import JobSettings
from nsight_core.standby.policy import StandbyKey
from nsight_core.standby.pool import StandbyPool


def preflight(request: ProfileRequest, config: EngineConfig) -> None:
    """Refuse a request that cannot work here (the host ``config`` describes), before
    anything is queued or started."""
    refuse_summed_rates(request.metrics, request.kernels)
    get_backend(request.backend).preflight(JobSettings.of_request(request), config)
    check_trusted_apart(request)
    check_named_files(request)


def check_trusted_apart(request: ProfileRequest) -> None:
    """Refuse a request whose reference or input maker shares a module with a candidate: the
    judge imports that module, and a candidate's module-level code would run where the
    verdicts are made (it could rebind the comparison or the random generator)."""
    shared = candidates_sharing_trusted_modules(request, request_workdir(request))
    if shared:
        raise NsightCoreError(
            ErrorClass.INVALID_REQUEST,
            "the reference and input maker must not share a module with a candidate: "
            + "; ".join(shared),
            "put the reference and the input maker in a file of their own (or in inline "
            "`reference_source`) and the candidates in theirs (or in `source`); a candidate "
            "may import the reference's module, never the other way round",
        )


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
    request: ProfileRequest | Admitted,
    job_dir: Path,
    *,
    result_id: str,
    config: EngineConfig | None = None,
    on_progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    gpu: str | None = None,
    standby: StandbyPool | None = None,
) -> ProfileResult:
    """Check and profile `request` in a fresh judge and contestant; never raises for job failures.

    ``config``: the engine's settings (the server's, read once from its environment;
    default: read from this process's environment now, once for this call, both plans
    included: this function is the engine's public entry, so a library caller is an edge too). `gpu` (an index or UUID) becomes the job's CUDA_VISIBLE_DEVICES:
    the one GPU it may use. With a `standby` pool the job goes to a judge pre-started for
    the same launch settings when there is one, and a judge for the next such job is
    started when this one ends.
    """
    created = iso(utc_now())
    job_dir = Path(job_dir)
    config = config if config is not None else EngineConfig.from_env()  # once, for both plans
    try:
        if isinstance(request, Admitted):  # the server's: resolved and checked when queued
            request = request.request
        else:
            request = resolve_defaults(request, config)
            preflight(request, config)
        plan = plan_job(request, job_dir, config, gpu=gpu)
    except NsightCoreError as err:
        return refused(err, result_id=result_id, created_at=created)
    job_dir.mkdir(parents=True, exist_ok=True)
    waits: dict[str, float] = {}
    run = run_planned(
        plan, config, on_progress=on_progress, cancel=cancel, standby=standby, waits=waits
    )
    rest = _after_a_hang(request, plan, run, cancel)
    if isinstance(rest, list):
        run = _with_failures(run, rest)
    elif rest is not None:
        with contextlib.suppress(NsightCoreError):  # planned once already: it does not fail
            (job_dir / REST_DIR).mkdir(exist_ok=True)
            again = plan_job(rest, job_dir / REST_DIR, config, gpu=gpu)
            more = run_planned(
                again, config, on_progress=on_progress, cancel=cancel, standby=standby, waits=waits
            )
            run = _joined(run, more)
    result = assemble_result(
        request,
        run,
        result_id=result_id,
        created_at=created,
        measured=for_job(plan.settings.gpu, config),
    )
    return with_waits(result, waits)


REST_DIR = "rest"
"""Where a job's other candidates run again after one of them hung (`_after_a_hang`)."""
RERUN_MIN_S = 10.0
"""The least time left for that run: less, and the other candidates are reported untimed."""


def _after_a_hang(
    request: ProfileRequest, plan: JobPlan, run: JobRun, cancel: threading.Event | None
) -> ProfileRequest | list[FailureEvent] | None:
    """The request for the candidates a hang cost their run; where no time is left for it,
    what to say of them instead; None when no candidate hung.

    A candidate call that outlives its own limit (judge/call_limit.py) ends the contestant,
    and with it the calls of every candidate not yet done: those are run once more without
    the one that hung, in the time the job has left, so a hang costs only its own candidate.
    A job that ran out of its own time (its call in flight is `timeout` too) has no time
    left for that run: its other candidates are reported untimed, saying why."""
    if cancel is not None and cancel.is_set():
        return None
    hung = {
        f.annotation
        for f in run.events.failures
        if f.error_class == ErrorClass.TIMEOUT and f.annotation in request.candidates
    }
    rest = [c for c in request.candidates if c not in hung]
    if not hung or not rest:
        return None
    left = plan.contestant_limit_s - run.wall_s
    if left >= RERUN_MIN_S:
        return request.model_copy(update={"candidates": rest, "time_limit_s": round(left, 1)})
    names = ", ".join(repr(h) for h in sorted(hung))
    return [
        FailureEvent(
            annotation=cand,
            phase="check",
            error_class=ErrorClass.TIMEOUT,
            message=f"not checked or timed: {names} hung and ended the job's processes, and "
            f"the {max(left, 0.0):.1f} s the job had left are under the {RERUN_MIN_S:g} s "
            "a run of the other candidates needs",
            hint="raise time_limit_s, or profile this candidate without the one that hung",
        )
        for cand in rest
    ]


def _joined(first: JobRun, rest: JobRun) -> JobRun:
    """The job as the rerun of its other candidates left it, with the first run's hang."""
    hung = [f for f in first.events.failures if f.error_class == ErrorClass.TIMEOUT]
    joined = _with_failures(rest, hung, first=True)
    return dataclasses.replace(joined, wall_s=first.wall_s + rest.wall_s)


def _with_failures(run: JobRun, more: Sequence[FailureEvent], *, first: bool = False) -> JobRun:
    """``run`` with ``more`` failures recorded in its events (before its own with ``first``)."""
    own = run.events.failures
    failures = [*more, *own] if first else [*own, *more]
    return dataclasses.replace(run, events=dataclasses.replace(run.events, failures=failures))


def run_planned(
    plan: JobPlan,
    config: EngineConfig,
    *,
    on_progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    standby: StandbyPool | None = None,
    waits: dict[str, float] | None = None,
) -> JobRun:
    """Run a request job's judge (and through it, its contestant); never raises for them.

    `waits` receives the seconds waited before the processes ran, by cause (the standby
    pool's `settle`): they are not the job's run time (`JobRun.wall_s`), and a result
    must say where both went."""
    job_dir = plan.job_dir
    plan.write_source()
    plan.job_spec().write(job_dir)
    key = StandbyKey.of(plan.launch, plan.env, plan.memory_bytes)
    load_before = host_load()
    tenants = TenantWatch(plan.settings.gpu)
    tail, outcome, wall_s = _attempt(plan, config, key, on_progress, cancel, standby, waits)
    if _retry_after_busy_profiler(plan, outcome, wall_s, cancel):
        # Another process held the GPU's profiler (none of ours: the pool's rule). Once
        # more, after our own holders are gone; the first attempt's files are kept aside.
        if standby is not None:
            standby.release_profiler()
        _set_aside(job_dir, FIRST_ATTEMPT_DIR)
        time.sleep(BUSY_PROFILER_RETRY_DELAY_S)
        first_s = wall_s + BUSY_PROFILER_RETRY_DELAY_S
        tail, outcome, wall_s = _attempt(plan, config, key, on_progress, cancel, standby, waits)
        if waits is not None:  # the first attempt is time before this run, named so
            waits["profiler_retry"] = first_s
    if standby is not None:
        standby.refill(key)  # after the last attempt: a retry starts none only to retire it
    tail.poll()
    events = read_events(job_dir / EVENTS_FILE)
    killed = killed_in_flight(job_dir, outcome) if events.end is None else None
    if killed is not None:  # a limit ended the judge too: name the call it had in flight
        events.failures.append(killed)
    error = outcome.to_error()
    wrapped = Wrapped([])
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
    return JobRun(
        job_dir=job_dir,
        settings=plan.settings,
        wrapped=wrapped,
        outcome=outcome,
        events=events,
        error=error,
        wall_s=wall_s,
        artifacts=job_artifacts(job_dir),
        host=(load_before, host_load(tenants.result())),
    )


FIRST_ATTEMPT_DIR = "attempt-1"
"""Where a job run twice (`_retry_after_busy_profiler`) keeps its first attempt's files."""
BUSY_PROFILER_RETRY_DELAY_S = 2.0
"""The pause before that retry: a profiler's session ends a moment after its process."""


def _attempt(
    plan: JobPlan,
    config: EngineConfig,
    key: StandbyKey,
    on_progress: ProgressCallback | None,
    cancel: threading.Event | None,
    standby: StandbyPool | None,
    waits: dict[str, float] | None,
) -> tuple[EventTail, SandboxOutcome, float]:
    """One run of the job's judge: (its events' tail, its outcome, its wall seconds). The
    caller refills the pool once its last attempt has ended."""
    tail = EventTail(plan.job_dir / EVENTS_FILE, on_progress)
    # One start path: the pool's judge pre-started for this key, else one started for it
    # now and handed the job at once; without a pool (pre-started judges off), a pool of
    # this job alone.
    pool = standby if standby is not None else StandbyPool(capacity=1, config=config)
    _settle(standby, waits, key)  # also before a job that will not use it: nothing may overlap
    t0 = time.monotonic()
    try:
        outcome = pool.run(
            key, plan.job_dir, wall_s=plan.judge_limit_s, poll=tail.poll, cancel=cancel
        )
    finally:
        if standby is None:
            pool.close()  # its judge's end, if it released the job first
    return tail, outcome, time.monotonic() - t0


def _retry_after_busy_profiler(
    plan: JobPlan, outcome: SandboxOutcome, wall_s: float, cancel: threading.Event | None
) -> bool:
    """Whether to run the job once more: its profiler was held by another process, it was
    not cancelled, and it used under half its time limit (a retry must fit in the rest)."""
    if cancel is not None and cancel.is_set():
        return False
    if outcome.error_class in (ErrorClass.CANCELLED, ErrorClass.TIMEOUT):
        return False
    return wall_s < plan.judge_limit_s / 2 and plan.backend.profiler_was_busy(plan.job_dir)


def _set_aside(job_dir: Path, name: str) -> None:
    """Move an attempt's own files (events, report, logs, calls, the judge's output) into
    ``job_dir/name``, so the next attempt starts from the job's inputs alone."""
    aside = job_dir / name
    aside.mkdir(exist_ok=True)
    for fname in {*JOB_ARTIFACTS.values(), CALLS_FILE, JUDGE_DIR}:
        top = fname.split("/", 1)[0]
        src = job_dir / top
        if src.exists():
            shutil.move(str(src), str(aside / top))


def run_worker(job: JobSpec, job_dir: Path, settings: JobSettings, config: EngineConfig) -> JobRun:
    """Run an `@kernel` function job: its contestant, wrapped by the backend, started cold
    (the user's own function annotates itself; there is no reference to judge)."""
    backend = get_backend(settings.backend)
    job.write(job_dir)
    argv = [sys.executable, "-P", "-m", "nsight_core.contestant", "--function", str(job_dir)]
    wrapped = backend.wrap(argv, settings.launch(), job_dir, config)
    wrapped = dataclasses.replace(wrapped, tool_version=backend.tool_version(wrapped.argv))
    tail = EventTail(job_dir / EVENTS_FILE, None)
    t0 = time.monotonic()
    outcome = run_sandboxed(
        wrapped.argv,
        cwd=job_dir,
        limits=SandboxLimits(
            wall_s=settings.time_limit_s, memory_bytes=default_memory_limit(config.job_memory)
        ),
        env=job_env(settings.gpu, config),
        poll=tail.poll,
        output_dir=job_dir,
    )
    wall_s = time.monotonic() - t0
    tail.poll()
    events = read_events(job_dir / EVENTS_FILE)
    error = outcome.to_error()
    own = backend.classify_end(outcome, wrapped, settings)
    if own is not None and (error is None or not events.failures):
        error = own
    return JobRun(
        job_dir=job_dir,
        settings=settings,
        wrapped=wrapped,
        outcome=outcome,
        events=events,
        error=error,
        wall_s=wall_s,
        artifacts=job_artifacts(job_dir),
    )


def job_artifacts(job_dir: Path) -> dict[str, str]:
    """The job's files that exist, by name (`JOB_ARTIFACTS`)."""
    return {
        name: str(job_dir / fname)
        for name, fname in JOB_ARTIFACTS.items()
        if (job_dir / fname).exists()
    }


def _settle(standby: StandbyPool | None, waits: dict[str, float] | None, key: StandbyKey) -> None:
    """Wait for the pool's standbys to start and released judges to end, noting how long."""
    if standby is None:
        return
    settled = standby.settle(key)
    if waits is not None:
        waits.update(settled)
