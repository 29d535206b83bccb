"""The judge process's entry points: take the job handed over, judge it, tell the pool.

Runs in the trusted judge process (boot.py imports it once the contestant or the handover
is up): a pre-started judge (`standby_main`) or an idle one (`idle_main`) reads its
`LaunchSpec` and its job, warms its checking path, runs the `Judge` (core.py), and
`release`s the pool once every event of the job is written.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

from pydantic import ValidationError

from nsight_core.errors import JobExit
from nsight_core.judge.calls import Inputs
from nsight_core.judge.core import START_TIMEOUT_S, Judge
from nsight_core.judge.gpu_state import GpuSampler
from nsight_core.judge.handover import Handover
from nsight_core.judge.verdict import Tally, judge_output, trivial_bound
from nsight_core.plan.config import NCU_ENV, EngineConfig
from nsight_core.processes.launch import ContestantGone, Launched
from nsight_core.processes.sandbox.env import inherited, take_inherited
from nsight_core.processes.seat import Seat
from nsight_core.protocol import (
    EVENTS_FILE,
    JOB_FILE,
    READY_FILE,
    RELEASE_FD_ENV,
    STANDBY_FILE,
    JobSpec,
    LaunchSpec,
)
from nsight_core.runtime.check import clone_args, same_result
from nsight_core.runtime.early_cuda import EarlyCuda
from nsight_core.runtime.process import (
    FRAMEWORKS,
    PRESTART_FRAMEWORKS,
    EventWriter,
    failure_event,
    init_cuda,
    preload_frameworks,
)


def warm_checks() -> None:
    """The judge runs its own checking path once on small CUDA arrays while its contestant
    starts: CUDA loads kernel modules on first use, and the job would pay for each (the
    random fill, clones, the trivial-answer bound and the comparison) on its critical path.
    A failure here changes nothing: the job's own calls load what they need."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    with contextlib.suppress(Exception):
        if torch.cuda.is_available():
            check_path_once("cuda")
            torch.cuda.synchronize()


def check_path_once(device: str) -> Tally:
    """The judge's comparison of one output with itself, per floating dtype, on ``device``."""
    import torch  # lazy: only where torch is installed (warm_checks looked)

    tally = Tally()
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = torch.randn(4, 64, device=device).to(dtype)
        inputs: Inputs = ((x,), {})
        y = clone_args(inputs)[0][0]
        bound = trivial_bound(x, inputs, None, None)
        judge_output(tally, x, y, atol=None, rtol=None, bound=bound)
        if not same_result(x, y).passed:
            tally.fail("warm-up: an output differs from its clone")
    return tally


def _read_job(job_dir: Path, spec: LaunchSpec) -> JobSpec | str:
    """The request job in ``job_dir`` for a judge launched with ``spec``; else why not."""
    try:
        job = JobSpec.model_validate_json((job_dir / JOB_FILE).read_text())
    except (OSError, ValidationError) as exc:
        return f"bad job file: {exc}"
    if job.request is None or job.launch is None or job.settings is None:
        return "not a request job (no request, launch settings or job settings)"
    if set(job.callables) != {job.request.inputs, *job.request.annotations}:
        return "the job's resolved callables are not the request's"
    if job.launch != spec:
        return "the job's settings differ from this judge's"
    return job


def _inherited_tools() -> EngineConfig:
    """What a judge wraps its contestant with when its server's plan could not be read:
    the ncu and PATH its server handed down (the allowlist, sandbox/env.py), the judge's
    only view of its server's settings."""
    ncu = (inherited(NCU_ENV) or "").strip()
    return EngineConfig(ncu=ncu, path=inherited("PATH") or os.defpath)


def standby_main(
    home: Path, handover: Handover, launched: Launched | None, early: EarlyCuda | None = None
) -> int:
    """A pre-started judge: seat the contestant for HOME's `LaunchSpec`, say so once it is
    up (the ready file, which the pool waits for), then run the job handed over.

    ``launched``: the contestant boot.py started from the server's plan (None: the judge
    makes the command itself); ``early``: the CUDA context boot.py began on a side thread."""
    release_fd = _release_fd()
    spec = _read_spec(home, launched)
    if spec is None:
        return int(JobExit.BAD_JOB)
    seat = Seat(spec, home, _inherited_tools(), prestarted=True, launched=launched)
    preload_frameworks(PRESTART_FRAMEWORKS)
    init_cuda(early)
    warm_checks()
    gpu = GpuSampler.for_backend(seat.backend.evidence)  # NVML's start, off the job's path
    try:
        seat.wait_ready(START_TIMEOUT_S)
    except (ContestantGone, TimeoutError, ValueError) as exc:
        sys.stderr.write(
            f"nsight_core.judge.entry: the standby's contestant did not start: {exc}\n"
        )
        seat.close()
        return int(JobExit.OK)
    (home / READY_FILE).touch()
    idle0 = time.monotonic()
    taken = handover.wait(seat.proc.alive)
    if taken is None:  # the contestant ended while it waited: the pool starts a fresh pair
        seat.close()
        return int(JobExit.OK)
    job = _read_job(taken.job_dir, spec)
    if isinstance(job, str):
        sys.stderr.write(f"nsight_core.judge.entry: {job}\n")
        seat.close()
        return int(JobExit.BAD_JOB)
    phases = {"standby_idle": round(time.monotonic() - idle0, 4)}
    return _run_job(job, taken.job_dir, seat, gpu, phases, 0.0, release_fd)


def idle_main(home: Path, handover: Handover, early: EarlyCuda | None = None) -> int:
    """An idle judge (handover.py): start before any request, then run the job handed over,
    whose contestant the handover thread started the moment it came.

    Its start is off the job's path unless the job came during it. Even then it warms its
    checking path, as a cold judge does: the contestant, started at the handover, takes
    longer to start than the warm-up, and every check would otherwise load its kernels."""
    release_fd = _release_fd()
    preload_frameworks(FRAMEWORKS)
    init_cuda(early)
    warm_checks()
    ready = time.monotonic()
    (home / READY_FILE).touch()
    taken = handover.wait()
    assert taken is not None  # no contestant to end before the job: it waits for one
    spec = _read_spec(home, taken.launched)
    if spec is None:
        return int(JobExit.BAD_JOB)
    seat = Seat(spec, home, _inherited_tools(), prestarted=False, launched=taken.launched)
    job = _read_job(taken.job_dir, spec)
    if isinstance(job, str):
        sys.stderr.write(f"nsight_core.judge.entry: {job}\n")
        seat.close()
        return int(JobExit.BAD_JOB)
    gpu = GpuSampler.for_backend(seat.backend.evidence)
    # How long it waited ready for the job, or how much of its start was left when it came.
    phases = {
        "judge.idle": round(max(0.0, taken.received - ready), 4),
        "judge.start_left": round(max(0.0, ready - taken.received), 4),
    }
    spawn_s = max(1e-4, seat.started - taken.received)  # the handover until the spawn
    return _run_job(job, taken.job_dir, seat, gpu, phases, spawn_s, release_fd)


def _read_spec(home: Path, launched: Launched | None) -> LaunchSpec | None:
    """HOME's `LaunchSpec`; None (the contestant stopped) when it is missing or bad."""
    try:
        return LaunchSpec.model_validate_json((home / STANDBY_FILE).read_text())
    except (OSError, ValidationError) as exc:
        sys.stderr.write(f"nsight_core.judge.entry: bad launch file: {exc}\n")
        if launched is not None:
            launched.proc.cancel.set()
        return None


def _run_job(
    job: JobSpec,
    job_dir: Path,
    seat: Seat,
    gpu: GpuSampler,
    phases: dict[str, float],
    spawn_s: float,
    release_fd: int | None,
) -> int:
    """Judge the job taken on ``seat``; its exit code, told to the pool once every event of
    the job is written."""
    assert job.request is not None
    judge = Judge(job, job.request, job_dir, seat, gpu=gpu)
    judge.account.phase_seconds.update(phases)
    try:
        code = judge.run(spawn_s)
    except Exception as exc:
        with EventWriter(job_dir / EVENTS_FILE) as events:
            events.emit(failure_event("<judge>", "profile", exc))
        code = int(JobExit.INTERNAL)
    release(release_fd, code)  # last: every event of the job is written and closed
    return code


def _release_fd() -> int | None:
    """The pool's release pipe (pre-started judges only); removed from the environment, so
    nothing this process starts is told of it (nor inherits it: sandbox.py closes it)."""
    raw = take_inherited(RELEASE_FD_ENV)
    try:
        return int(raw) if raw else None
    except ValueError:
        return None


def release(fd: int | None, code: int) -> None:
    """Tell the pool the job's record is complete, with this judge's exit code: the process's
    own end (a CUDA context's teardown) need not delay the result."""
    if fd is None:
        return
    with contextlib.suppress(OSError):
        os.write(fd, f"{code}\n".encode())
        os.close(fd)
