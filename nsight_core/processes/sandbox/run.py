"""Run a process to its end under the package's contract: `run_sandboxed` for a job,
`run_command` for a short external command.

The runner ties the other modules together: it builds the environment, sets the child's
limits between fork and exec, supervises time, memory and cancel while pumping output,
kills the whole job at the end, and classifies how it ended.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import resource
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from nsight_core.errors import WORKER_EXIT_CLASS, ErrorClass
from nsight_core.processes.sandbox.env import build_env, inherited
from nsight_core.processes.sandbox.landlock import FsAccess, landlock_enforce, landlock_ruleset
from nsight_core.processes.sandbox.limits import Deadline, SandboxLimits
from nsight_core.processes.sandbox.memory import default_memory_limit
from nsight_core.processes.sandbox.outcome import (
    SandboxOutcome,
    classify_end,
    name_of_signal,
    not_started,
)
from nsight_core.processes.sandbox.output import Pipes, StreamCapture, save_stream
from nsight_core.processes.sandbox.this_process import (
    LIBC,
    PARENT_FD_ENV,
    PR_SET_CHILD_SUBREAPER,
    PR_SET_PDEATHSIG,
    prctl,
)
from nsight_core.processes.sandbox.tree import JOB_MARKER_ENV, job_rss, kill_job, signal_group
from nsight_core.runtime.files import STDERR_FILE, STDOUT_FILE

_DRAIN_S = 1.0
"""After the group is killed, how long to keep reading pipes that a stray holder keeps open."""


def _limit_child(fsize: tuple[int, int], parent_pid: int, landlock_fd: int) -> None:
    # Runs in the child between fork and exec, possibly forked from a threaded server:
    # only system calls on precomputed values (no imports, no locks).
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, fsize)
    if LIBC is None:
        return
    # SIGKILL when the thread that forked us ends; it may already have, before this call.
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)
    # Orphans of our tree (a double fork with setsid) are re-parented to us, not to init,
    # so they stay visible as our descendants while we live. Survives exec.
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    if landlock_fd >= 0:
        landlock_enforce(landlock_fd)


def _fsize_limit(file_size_bytes: int) -> tuple[int, int]:
    _soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    soft = file_size_bytes if hard == resource.RLIM_INFINITY else min(file_size_bytes, hard)
    return soft, hard


def _leader_exited(pid: int) -> bool:
    """True once the leader is a zombie; WNOWAIT leaves it unreaped so its pgid stays ours."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


@dataclass
class _End:
    timed_out: bool = False
    cancelled: bool = False
    out_of_memory: bool = False
    peak_rss: int = 0
    memory_limit: int = 0
    strays_killed: int = 0


def _supervise(
    proc: subprocess.Popen[bytes],
    pipes: Pipes,
    limits: SandboxLimits,
    cancel: threading.Event | None,
    poll: Callable[[], None] | None,
    start: float,
    end: _End,
    rearmable: Deadline | None = None,
) -> _End:
    """Pump output until the leader exits, a limit passes, or cancel is set."""
    deadline = start + limits.wall_s
    term_at: float | None = None
    next_poll = start + limits.poll_interval_s
    while True:
        if rearmable is not None:
            deadline = rearmable.at
        now = time.monotonic()
        wake = min(next_poll, deadline if term_at is None else term_at + limits.kill_grace_s)
        pipes.pump(max(0.0, min(limits.poll_interval_s, wake - now)))
        now = time.monotonic()
        if _leader_exited(proc.pid):
            return end
        if cancel is not None and cancel.is_set():
            end.cancelled = True
            return end
        # Periodic work runs once per interval whether or not a `poll` callback was given:
        # advancing `next_poll` only with a callback left supervisors without one (the judge's
        # contestant thread) spinning on select(0) and /proc scans at 100 % of a core, which
        # slowed the contestant's start-up about 1.7x and every reply the judge waited for.
        due = now >= next_poll
        if due:
            next_poll = now + limits.poll_interval_s
        if end.memory_limit and due:
            end.peak_rss = max(end.peak_rss, rss := job_rss(proc.pid))
            if rss > end.memory_limit:
                end.out_of_memory = True
                return end
        if term_at is None and now >= deadline:
            end.timed_out = True
            term_at = now
            signal_group(proc.pid, signal.SIGTERM)
        elif term_at is not None and now >= term_at + limits.kill_grace_s:
            return end
        if poll is not None and due:
            poll()


def run_sandboxed(
    argv: Sequence[str],
    *,
    cwd: Path,
    limits: SandboxLimits,
    env: Mapping[str, str] | None = None,
    cancel: threading.Event | None = None,
    poll: Callable[[], None] | None = None,
    output_dir: Path | None = None,
    keep_tmp: bool = False,
    exit_classes: Mapping[int, ErrorClass | None] | None = None,
    pass_fds: Sequence[int] = (),
    fs_access: FsAccess | None = None,
    deadline: Deadline | None = None,
) -> SandboxOutcome:
    """Run ``argv`` to its end under the contract of this module; never raises for the child.

    ``env`` holds extras on top of the allowlisted environment. ``exit_classes`` maps exit
    codes to classes (default: the worker's codes); 0 always means success. ``pass_fds``
    are descriptors the child inherits (all others are closed), e.g. a pipe's write end.
    ``fs_access`` (opt-in) confines the child with Landlock to those paths plus its private
    directory (written) and ``cwd`` (read); where Landlock is missing the job does not start.
    ``deadline``, when given, replaces ``limits.wall_s`` and may be re-armed meanwhile.
    """
    argv = [str(a) for a in argv]
    table: Mapping[int, ErrorClass | None] = (
        exit_classes
        if exit_classes is not None
        else {int(k): v for k, v in WORKER_EXIT_CLASS.items()}
    )
    end = _End(
        memory_limit=default_memory_limit() if limits.memory_bytes is None else limits.memory_bytes
    )
    token = secrets.token_hex(8)
    tmp = Path(tempfile.mkdtemp(prefix="nspy-job-"))
    start = time.monotonic()
    child_env = build_env(env, home=tmp)
    outer = inherited(JOB_MARKER_ENV) or ""  # a job inside a job: both markers
    child_env[JOB_MARKER_ENV] = f"{outer} {token}".strip()
    watch_r, watch_w = os.pipe()  # both ends close-on-exec; only watch_r is passed on
    child_env[PARENT_FD_ENV] = str(watch_r)
    landlock_fd = -1
    try:
        try:
            if fs_access is not None:
                landlock_fd = landlock_ruleset(
                    dataclasses.replace(
                        fs_access,
                        read=(*fs_access.read, cwd),
                        write=(*fs_access.write, tmp),
                    )
                )
            setup = functools.partial(
                _limit_child, _fsize_limit(limits.file_size_bytes), os.getpid(), landlock_fd
            )
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=child_env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
                pass_fds=(*pass_fds, watch_r),
                preexec_fn=setup,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return not_started(argv, exc, tmp if keep_tmp else None, time.monotonic() - start)
        finally:
            os.close(watch_r)
            if landlock_fd >= 0:
                os.close(landlock_fd)
        captures = _run_started(proc, limits, cancel, poll, start, end, token, deadline)
        wall = time.monotonic() - start
    finally:
        os.close(watch_w)
        if not keep_tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    files = {}
    if output_dir is not None:
        files["stdout"] = save_stream(captures["stdout"], output_dir / STDOUT_FILE)
        files["stderr"] = save_stream(captures["stderr"], output_dir / STDERR_FILE)
    code = proc.returncode
    ended = SandboxOutcome(
        argv=argv,
        exit_code=None if code < 0 else code,
        signal_name=name_of_signal(-code) if code < 0 else None,
        timed_out=end.timed_out,
        cancelled=end.cancelled,
        wall_s=wall,
        stdout=captures["stdout"],
        stderr=captures["stderr"],
        error_class=None,
        tmp_dir=tmp,
        output_files=files,
        out_of_memory=end.out_of_memory,
        peak_rss_bytes=end.peak_rss,
        memory_limit_bytes=end.memory_limit,
        strays_killed=end.strays_killed,
    )
    error_class, message, hint = classify_end(
        ended,
        wall_limit_s=deadline.limit_s if deadline is not None else limits.wall_s,
        exit_classes=table,
    )
    return dataclasses.replace(ended, error_class=error_class, message=message, hint=hint)


COMMAND_OUTPUT_BYTES = 256 * 1024**2
"""Output `run_command` keeps whole: ncu's list of every full metric name of a chip is MBs."""
COMMAND_KILL_GRACE_S = 1.0
"""Seconds from SIGTERM to SIGKILL for a short command: it has nothing to flush."""


def run_command(
    argv: Sequence[str],
    timeout_s: float,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    output_bytes: int = COMMAND_OUTPUT_BYTES,
) -> SandboxOutcome:
    """Run a short external command (``ncu --version``, ``nvidia-smi``, a metric query).

    The same contract as a job: own process group killed at ``timeout_s`` (+ a 1 s grace),
    allowlisted environment with a private ``HOME``. Output is kept whole up to
    ``output_bytes``; every non-zero exit is crashed. Never raises for the child: read
    ``exit_code`` (None when it did not start, timed out or died of a signal) and ``message``.
    """
    return run_sandboxed(
        argv,
        cwd=cwd if cwd is not None else Path(tempfile.gettempdir()),
        limits=SandboxLimits(
            wall_s=timeout_s,
            kill_grace_s=COMMAND_KILL_GRACE_S,
            head_bytes=output_bytes,
            tail_bytes=0,
        ),
        env=env,
        exit_classes={},
    )


def _run_started(
    proc: subprocess.Popen[bytes],
    limits: SandboxLimits,
    cancel: threading.Event | None,
    poll: Callable[[], None] | None,
    start: float,
    end: _End,
    token: str,
    deadline: Deadline | None = None,
) -> dict[str, StreamCapture]:
    pipes = Pipes(proc, limits)
    try:
        _supervise(proc, pipes, limits, cancel, poll, start, end, deadline)
    finally:
        # Whatever happened (also an exception from poll), no process of the job survives:
        # the group, and every descendant or carrier of the job id outside it.
        # The leader is still unreaped here, so proc.pid is still this group's id.
        end.strays_killed = kill_job(proc.pid, token.encode())
        proc.wait()
        pipes.drain(_DRAIN_S)
        pipes.close()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    return {name: cap.result() for name, cap in pipes.caps.items()}
