"""What a process does to itself through prctl: die with its parent, stay unreadable, know its age.

Called at the start of the server, the judge and the contestant, and between fork and exec
by the runner; every helper degrades to "not in force" where Linux's prctl is missing.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from pathlib import Path

from nsight_core.processes.sandbox.env import inherited
from nsight_core.processes.sandbox.tree import (
    JOB_MARKER_ENV,
    kill_pids,
    marked,
    proc_table,
    self_and_ancestors,
    signal_group,
)

PARENT_FD_ENV = "NSPY_SANDBOX_PARENT_FD"
"""The child's descriptor of a pipe whose write end only the sandboxing parent holds."""

PR_SET_PDEATHSIG = 1
PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38


def _load_libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    ulong = ctypes.c_ulong
    libc.prctl.argtypes = [ctypes.c_int, ulong, ulong, ulong, ulong]
    libc.prctl.restype = ctypes.c_int
    libc.syscall.restype = ctypes.c_long
    return libc


LIBC = _load_libc()


def prctl(option: int, arg: int = 0) -> int:
    """prctl(option, arg, 0, 0, 0); -1 when unavailable. Safe between fork and exec."""
    if LIBC is None:
        return -1
    return int(LIBC.prctl(option, arg, 0, 0, 0))


def die_with_parent() -> bool:
    """SIGKILL this process when its parent ends (``PR_SET_PDEATHSIG``); no helper process.

    For a process started under a launcher that waits for all its target's descendants
    (ncu with ``--target-processes all``): `watch_parent_pipe`'s watcher would be such a
    descendant, and ncu would wait for it forever. Returns True when in force.
    """
    parent = os.getppid()
    if prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        return False
    if os.getppid() != parent:  # the parent died before the call
        os.kill(os.getpid(), signal.SIGKILL)
    return True


def watch_parent_pipe() -> bool:
    """In a sandboxed Python child: die with the whole job once the sandboxing parent is gone.

    Forks a small watcher into this process's group that blocks on the pipe named by
    ``NSPY_SANDBOX_PARENT_FD``; at end-of-file (the parent process died, whatever the
    signal) it SIGKILLs the job's processes outside the group (by job id), then the group,
    itself included. A watcher process, not a thread: ``PR_SET_PDEATHSIG`` kills this
    process at the same moment, and a thread would die with it before the group is reached.
    Returns False when this process was not started by `run_sandboxed`. Call it early,
    before candidate code runs and before threads are started.
    """
    raw = inherited(PARENT_FD_ENV) or ""
    if not raw.isdigit():
        return False
    fd = int(raw)
    try:
        os.fstat(fd)
    except OSError:
        return False
    os.set_inheritable(fd, False)
    token = (inherited(JOB_MARKER_ENV) or "").split()[-1:]
    if os.fork() != 0:
        return True
    try:  # the watcher: no threads, only system calls until it kills the group
        while True:
            try:
                if not os.read(fd, 1):
                    break
            except InterruptedError:
                continue
            except OSError:
                break
        if token:
            kill_pids(marked(token[0].encode(), proc_table(), self_and_ancestors()))
        signal_group(os.getpgid(0), signal.SIGKILL)
    finally:
        os._exit(0)


def protect_this_process() -> bool:
    """Make this process non-dumpable: its ``/proc/<pid>/environ``, ``mem`` and ``maps``
    become unreadable to other processes of the same non-root user (a candidate walking
    ``/proc`` up from its parent), and it cannot be ptraced by them. Root still can.

    For the server at start-up. Children get the default back at ``exec``. Returns True when
    in force.
    """
    if prctl(PR_SET_DUMPABLE, 0) != 0:
        return False
    return prctl(PR_GET_DUMPABLE) == 0


def process_age_s() -> float:
    """Seconds since this process started (Linux /proc; 0.0 elsewhere): the interpreter's
    start and our imports belong to the job's timeline too."""
    age = age_of_process("self")
    return 0.0 if age is None else age


def age_of_process(pid: int | str) -> float | None:
    """Seconds since process ``pid`` (or ``"self"``) started, to the kernel's clock tick
    (10 ms); None where /proc does not say (another OS, a process gone)."""
    try:
        start_ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot_s = time.clock_gettime(time.CLOCK_BOOTTIME)
        return max(0.0, boot_s - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return None
