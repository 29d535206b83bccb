"""Start, limit and end processes: the only module that spawns or kills.

Stdlib-only (plus `nsight_core.errors`), so tools on a bare GPU host can use it.
`run_sandboxed` runs a job; `run_command` runs a short external command (ncu, nvidia-smi)
under the same contract with output kept whole.

Contract of `run_sandboxed`:

- The child gets its own session and process group (``start_new_session``); every signal
  goes to the whole group (``killpg``), so grandchildren such as ncu's target die too.
  The group leader is not reaped until the group has been sent SIGKILL, so its id cannot
  be recycled under us.
- The child dies with its parent: ``PR_SET_PDEATHSIG`` (SIGKILL when the forking thread
  ends) and a pipe whose read end it inherits (``NSPY_SANDBOX_PARENT_FD``); a Python child
  calls `watch_parent_pipe` to kill its whole group when the pipe reports end-of-file.
- Descendants that leave the group (``setsid``) are found too: the leader is a child
  subreaper (orphans in its tree stay its descendants), and every process carries the job's
  id in ``NSPY_SANDBOX_JOBS``; at the end `/proc` is walked (group, session, parent links,
  job id) and everything found gets SIGKILL until a walk finds none alive.
- Resident memory: the RSS summed over the job's processes is polled; past
  ``limits.memory_bytes`` (default half the RAM, ``NSPY_MCP_JOB_MEMORY``) the job ends as
  ``out_of_memory`` with the peak.
- Optional file system allow-list (``fs_access``): Landlock, applied before ``exec``.
- stdin is ``/dev/null``. stdout and stderr are read through pipes into a capped head and
  a capped tail; the bytes in between are counted, never stored, so 10 MB of output costs
  only the caps. When ``output_dir`` is given each stream is saved there, capped the same way.
- The environment is an allowlist of the parent's (`ENV_ALLOW_NAMES`, `ENV_ALLOW_PREFIXES`,
  minus anything that looks like a credential, `ENV_DENY_PATTERNS`), plus explicit extras.
  ``HOME`` and ``TMPDIR`` point at a private temporary directory made for this job and
  removed afterwards unless ``keep_tmp``.
- Core dumps are off (``RLIMIT_CORE=0``) and written files are capped (``RLIMIT_FSIZE``).
  The address space is not limited: CUDA reserves far more virtual memory than it uses.
- Wall clock: SIGTERM to the group at ``limits.wall_s``, SIGKILL ``limits.kill_grace_s``
  later (or as soon as the leader is gone), so a job ends within limit + grace. A
  `Deadline` passed instead can be re-armed while the process runs (a pre-started judge
  waits under an idle limit, then gets its job's limit from the moment it is handed one).
  ``cancel`` is checked every ``limits.poll_interval_s``; when set the group gets SIGKILL
  at once. ``poll`` is called at the same pace so the caller can tail progress files.
- When `run_sandboxed` returns, the whole group has been sent SIGKILL and the leader reaped,
  also when ``poll`` raises or the caller is interrupted.
- The outcome's `ErrorClass` is decided here and nowhere else: cancelled, then
  out_of_memory, then timeout
  (with the last output lines), then a signal (crashed, with its name), then the exit
  code through ``exit_classes`` (the worker's `WORKER_EXIT_CLASS` by default); any other
  non-zero code is crashed, with the stderr tail.

Size: over 1,200 lines, deliberately one module: AGENTS.md makes it the only module that
starts or kills processes, and it stays stdlib-only for bare GPU hosts. It holds the runner,
descendant tracking, the memory limit and Landlock; a package (sandbox/) split along those
lines is the next clean-up.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fnmatch
import functools
import os
import resource
import secrets
import selectors
import shutil
import signal
import site
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nsight_core.errors import WORKER_EXIT_CLASS, ErrorClass, NsightCoreError
from nsight_core.runtime.files import STDERR_FILE, STDOUT_FILE

ENV_ALLOW_NAMES = frozenset(
    {
        "PATH",
        "LANG",
        "LANGUAGE",
        "TZ",
        "LD_LIBRARY_PATH",
        "PYTHONPATH",
        "PYTHONHASHSEED",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "NVTX_INJECTION64_PATH",
    }
)
"""Variables passed through by exact name: what Python, CUDA and the frameworks need."""

ENV_ALLOW_PREFIXES = (
    "LC_",
    "CUDA_",
    "NVIDIA_",
    "NV_",
    "TRITON_",
    "TORCH_",
    "TORCHINDUCTOR_",
    "CUPY_",
    "NCU_",
)
"""Variables passed through by prefix (device selection, JIT caches, profiler settings)."""

ENV_DENY_PATTERNS = (
    "*TOKEN*",
    "*KEY*",
    "*SECRET*",
    "*PASSWORD*",
    "*PASSWD*",
    "*CREDENTIAL*",
    "*AUTH*",
    "AWS_*",
)
"""Dropped even when allowed above: candidate code must never see the server's credentials."""

KILL_GRACE_S = 5.0
"""Seconds between SIGTERM and SIGKILL at the time limit: long enough for ncu to flush."""

JOB_MARKER_ENV = "NSPY_SANDBOX_JOBS"
"""Ids of the sandboxed jobs a process belongs to, outermost first, space-separated.

Inherited by every descendant (nested sandboxes append to it), so a process that left the
group with ``setsid`` and lost its parent is still found by reading ``/proc/<pid>/environ``.
"""
PARENT_FD_ENV = "NSPY_SANDBOX_PARENT_FD"
"""The child's descriptor of a pipe whose write end only the sandboxing parent holds."""
MEMORY_ENV = "NSPY_MCP_JOB_MEMORY"
"""Resident-memory limit of a job: bytes, ``8G``/``512M``, ``40%`` of RAM, or ``0``/``off``."""
DEFAULT_MEMORY_SHARE = 0.5
"""Default limit as a share of physical RAM: one runaway job cannot push the host into swap."""

_PR_SET_PDEATHSIG = 1
_PR_GET_DUMPABLE = 3
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS = 38

_KILL_ROUNDS_S = 3.0
"""How long the end-of-job walk keeps killing until no member of the job is alive."""

_DRAIN_S = 1.0
"""After the group is killed, how long to keep reading pipes that a stray holder keeps open."""

_READ_CHUNK = 65536


@dataclass(frozen=True)
class SandboxLimits:
    """What one sandboxed process may use."""

    wall_s: float
    """Wall-clock limit; the group gets SIGTERM when it is reached."""
    kill_grace_s: float = KILL_GRACE_S
    """Seconds from SIGTERM to SIGKILL."""
    head_bytes: int = 64 * 1024
    """Bytes kept from the start of each stream."""
    tail_bytes: int = 64 * 1024
    """Bytes kept from the end of each stream."""
    file_size_bytes: int = 8 * 1024**3
    """RLIMIT_FSIZE: largest file the job may write (ncu reports of long sweeps are big)."""
    poll_interval_s: float = 0.1
    """How often cancel and resident memory are checked and ``poll`` is called."""
    memory_bytes: int | None = None
    """Resident memory summed over the job's processes; None: `default_memory_limit()`,
    0: no limit."""

    def __post_init__(self) -> None:
        if self.wall_s <= 0 or self.kill_grace_s < 0 or self.poll_interval_s <= 0:
            raise ValueError("SandboxLimits: wall_s and poll_interval_s > 0, kill_grace_s >= 0")
        if self.head_bytes < 0 or self.tail_bytes < 0 or self.file_size_bytes <= 0:
            raise ValueError("SandboxLimits: byte caps must be non-negative")
        if self.memory_bytes is not None and self.memory_bytes < 0:
            raise ValueError("SandboxLimits: memory_bytes must be None, 0 or positive")


class Deadline:
    """A wall-clock limit that can be re-armed while its process runs.

    A process started before it has work (standby.py) must not be timed from its start:
    it waits under an idle limit, and the work's own limit counts from the handover.
    Re-arming is one assignment of a tuple, read whole by the supervising thread.
    """

    def __init__(self, limit_s: float) -> None:
        self._state = (0.0, 0.0)
        self.arm(limit_s)

    def arm(self, limit_s: float) -> None:
        """The process may run ``limit_s`` more seconds from now."""
        if limit_s <= 0:
            raise ValueError("Deadline: limit_s must be > 0")
        self._state = (time.monotonic() + limit_s, limit_s)

    @property
    def at(self) -> float:
        return self._state[0]

    @property
    def limit_s(self) -> float:
        return self._state[1]


@dataclass(frozen=True)
class StreamCapture:
    """One output stream: its first and last bytes and how much lies between."""

    head: bytes
    tail: bytes
    total_bytes: int
    omitted_bytes: int

    def text(self) -> str:
        """Head and tail as text, with a marker where bytes were left out."""
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        if self.omitted_bytes:
            return f"{head}\n[... {self.omitted_bytes} bytes omitted ...]\n{tail}"
        return head + tail

    def last_lines(self, n: int) -> list[str]:
        """The last ``n`` non-empty lines that were kept."""
        kept = (self.tail or self.head).decode("utf-8", "replace")
        return [line for line in kept.splitlines() if line.strip()][-n:]


@dataclass(frozen=True)
class SandboxOutcome:
    """How a sandboxed process ended, and the one ErrorClass that says so."""

    argv: list[str]
    exit_code: int | None
    """The exit status; None when a signal ended the process or it never started."""
    signal_name: str | None
    """The signal that ended the process ('SIGSEGV'), if one did."""
    timed_out: bool
    cancelled: bool
    wall_s: float
    stdout: StreamCapture
    stderr: StreamCapture
    error_class: ErrorClass | None
    """None when the process exited 0 (or with a code mapped to None)."""
    message: str = ""
    hint: str = ""
    tmp_dir: Path | None = None
    """The private directory (HOME, TMPDIR); still on disk only when ``keep_tmp``."""
    output_files: dict[str, Path] = field(default_factory=dict)
    """'stdout' / 'stderr' -> the capped copy saved in ``output_dir``."""
    out_of_memory: bool = False
    """True when the job was killed for passing its resident-memory limit."""
    peak_rss_bytes: int = 0
    """Largest resident memory seen, summed over the job's processes at one poll."""
    memory_limit_bytes: int = 0
    """The limit that applied (0: none)."""
    strays_killed: int = 0
    """Processes outside the leader's group (``setsid``) found and killed at the end."""

    def to_error(self) -> NsightCoreError | None:
        """The failure as an exception, or None when the process ended well."""
        if self.error_class is None:
            return None
        return NsightCoreError(self.error_class, self.message, self.hint)


class _Capture:
    """Head kept whole, tail kept as a bounded window, everything counted."""

    def __init__(self, head_cap: int, tail_cap: int) -> None:
        self._head_cap = head_cap
        self._tail_cap = tail_cap
        self._head = bytearray()
        self._tail = bytearray()
        self._total = 0

    def feed(self, data: bytes) -> None:
        self._total += len(data)
        room = self._head_cap - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data and self._tail_cap > 0:
            self._tail += data
            # Trim in batches so a stream of small writes does not memmove on every read.
            if len(self._tail) > 2 * self._tail_cap:
                del self._tail[: len(self._tail) - self._tail_cap]

    def result(self) -> StreamCapture:
        tail = bytes(self._tail[-self._tail_cap :]) if self._tail_cap else b""
        omitted = self._total - len(self._head) - len(tail)
        return StreamCapture(bytes(self._head), tail, self._total, omitted)


def build_env(
    extra: Mapping[str, str] | None = None,
    *,
    home: Path,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The child's environment: allowlisted names of ``base`` (default os.environ), then extras.

    Extras are trusted (they come from our own code) and may override anything.
    """
    source = os.environ if base is None else base
    env: dict[str, str] = {}
    for name, value in source.items():
        allowed = name in ENV_ALLOW_NAMES or name.startswith(ENV_ALLOW_PREFIXES)
        denied = any(fnmatch.fnmatchcase(name.upper(), p) for p in ENV_DENY_PATTERNS)
        if allowed and not denied:
            env[name] = value
    env.setdefault("PATH", os.defpath)
    env["HOME"] = str(home)
    env["TMPDIR"] = str(home)
    # Unbuffered so the last lines before a hang or crash reach us.
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


# --------------------------------------------------------------------------------------
# Process control through prctl (Linux); every helper degrades to "not in force" elsewhere.
# --------------------------------------------------------------------------------------


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


_LIBC = _load_libc()


def _prctl(option: int, arg: int = 0) -> int:
    """prctl(option, arg, 0, 0, 0); -1 when unavailable. Safe between fork and exec."""
    if _LIBC is None:
        return -1
    return int(_LIBC.prctl(option, arg, 0, 0, 0))


def _limit_child(fsize: tuple[int, int], parent_pid: int, landlock_fd: int) -> None:
    # Runs in the child between fork and exec, possibly forked from a threaded server:
    # only system calls on precomputed values (no imports, no locks).
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, fsize)
    if _LIBC is None:
        return
    # SIGKILL when the thread that forked us ends; it may already have, before this call.
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)
    # Orphans of our tree (a double fork with setsid) are re-parented to us, not to init,
    # so they stay visible as our descendants while we live. Survives exec.
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    if landlock_fd >= 0:
        _landlock_enforce(landlock_fd)


def die_with_parent() -> bool:
    """SIGKILL this process when its parent ends (``PR_SET_PDEATHSIG``); no helper process.

    For a process started under a launcher that waits for all its target's descendants
    (ncu with ``--target-processes all``): `watch_parent_pipe`'s watcher would be such a
    descendant, and ncu would wait for it forever. Returns True when in force.
    """
    parent = os.getppid()
    if _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
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
    raw = os.environ.get(PARENT_FD_ENV, "")
    if not raw.isdigit():
        return False
    fd = int(raw)
    try:
        os.fstat(fd)
    except OSError:
        return False
    os.set_inheritable(fd, False)
    token = os.environ.get(JOB_MARKER_ENV, "").split()[-1:]
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
            _kill_pids(_marked(token[0].encode(), _proc_table(), _self_and_ancestors()))
        _signal_group(os.getpgid(0), signal.SIGKILL)
    finally:
        os._exit(0)


def protect_this_process() -> bool:
    """Make this process non-dumpable: its ``/proc/<pid>/environ``, ``mem`` and ``maps``
    become unreadable to other processes of the same non-root user (a candidate walking
    ``/proc`` up from its parent), and it cannot be ptraced by them. Root still can.

    For the server at start-up. Children get the default back at ``exec``. Returns True when
    in force.
    """
    if _prctl(_PR_SET_DUMPABLE, 0) != 0:
        return False
    return _prctl(_PR_GET_DUMPABLE) == 0


# --------------------------------------------------------------------------------------
# Finding a job's processes in /proc
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Proc:
    ppid: int
    pgid: int
    sid: int
    zombie: bool
    rss_pages: int


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _proc_table() -> dict[int, _Proc]:
    """Every process now: parent, group, session, zombie or not, resident pages."""
    table: dict[int, _Proc] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read()
            fields = raw[raw.rfind(b")") + 2 :].split()
            table[int(name)] = _Proc(
                ppid=int(fields[1]),
                pgid=int(fields[2]),
                sid=int(fields[3]),
                zombie=fields[0] in (b"Z", b"X"),
                rss_pages=int(fields[21]),
            )
        except (OSError, IndexError, ValueError):
            continue
    return table


def _job_members(leader: int, table: Mapping[int, _Proc]) -> set[int]:
    """The leader, its group and session, and every descendant of those by parent links."""
    members = {pid for pid, p in table.items() if leader in (pid, p.pgid, p.sid) and pid != 0}
    children: dict[int, list[int]] = {}
    for pid, p in table.items():
        children.setdefault(p.ppid, []).append(pid)
    stack = list(members)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in members:
                members.add(child)
                stack.append(child)
    return members


def _marked(token: bytes, table: Mapping[int, _Proc], skip: set[int]) -> set[int]:
    """Live processes whose environment names job ``token`` in ``NSPY_SANDBOX_JOBS``."""
    prefix = JOB_MARKER_ENV.encode() + b"="
    found: set[int] = set()
    for pid, p in table.items():
        if pid in skip or p.zombie:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                data = f.read()
        except OSError:
            continue
        for entry in data.split(b"\0"):
            if entry.startswith(prefix) and token in entry[len(prefix) :].split():
                found.add(pid)
    return found


def _self_and_ancestors(table: Mapping[int, _Proc] | None = None) -> set[int]:
    """This process and its ancestors: never killed by a walk, whatever they carry."""
    table = _proc_table() if table is None else table
    out = {0, 1, os.getpid()}
    pid = os.getpid()
    while pid in table and table[pid].ppid not in out:
        pid = table[pid].ppid
        out.add(pid)
    return out


def _kill_pids(pids: set[int], sig: signal.Signals = signal.SIGKILL) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _kill_job(leader: int, token: bytes) -> int:
    """SIGKILL the whole job, found first and frozen; the number of strays outside its group.

    Members are stopped (SIGSTOP) walk after walk until a walk finds no new one: a stopped
    process can neither fork nor exit, so parent links hold and nothing is born unseen. Then
    all get SIGKILL, until a walk finds none alive. The leader is still unreaped, so its
    pid, group and session ids are still the job's. Killed processes re-parented to us (we
    are a subreaper when nested) are reaped.
    """
    protected = _self_and_ancestors()
    stopped: set[int] = set()
    strays: set[int] = set()
    end = time.monotonic() + _KILL_ROUNDS_S
    sig = signal.SIGSTOP
    while True:
        table = _proc_table()
        members = (_job_members(leader, table) | _marked(token, table, protected)) - protected
        live = {pid for pid in members if not table[pid].zombie}
        strays |= {pid for pid in live if table[pid].pgid != leader}
        if sig == signal.SIGSTOP:
            live -= stopped
            if not live:
                sig = signal.SIGKILL
                continue
            stopped |= live
        elif not live or time.monotonic() > end:
            break
        _signal_group(leader, sig)
        _kill_pids(live, sig)
        if time.monotonic() > end:
            sig = signal.SIGKILL
        time.sleep(0.002 if sig == signal.SIGSTOP else 0.01)
    me = os.getpid()
    for pid in stopped - {leader}:
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if fields[0] == b"Z" and int(fields[1]) == me:
                os.waitpid(pid, os.WNOHANG)
    return len(strays)


def _job_rss(leader: int) -> int:
    """Resident bytes summed over the job's processes (shared pages count once per process)."""
    table = _proc_table()
    members = _job_members(leader, table) - _self_and_ancestors(table)
    return sum(table[pid].rss_pages for pid in members if not table[pid].zombie) * _PAGE


# --------------------------------------------------------------------------------------
# Memory limit
# --------------------------------------------------------------------------------------

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def physical_memory_bytes() -> int:
    """Physical RAM of the host; 0 when unknown."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def parse_memory(text: str, ram: int | None = None) -> int:
    """``8G``, ``512MiB``, ``123456``, ``40%`` (of RAM), ``0``/``off`` (no limit) -> bytes."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    if t in ("0", "OFF", "NONE", "NO"):
        return 0
    try:
        if t.endswith("%"):
            share = float(t[:-1]) / 100
            if not 0 < share <= 1:
                raise ValueError
            return int((physical_memory_bytes() if ram is None else ram) * share)
        unit = t[-1:] if t[-1:] in _UNITS and not t[-1:].isdigit() else ""
        value = float(t[: len(t) - len(unit)])
        if value < 0:
            raise ValueError
        return int(value * _UNITS[unit])
    except ValueError:
        raise NsightCoreError(
            ErrorClass.INVALID_REQUEST,
            f"{MEMORY_ENV}={text!r} is not a memory size",
            "write bytes, 8G, 512M, a share of RAM like 40%, or 0 for no limit",
        ) from None


def default_memory_limit() -> int:
    """The job limit when none is given: ``NSPY_MCP_JOB_MEMORY``, else half the RAM (0: none)."""
    raw = os.environ.get(MEMORY_ENV, "").strip()
    if raw:
        return parse_memory(raw)
    return int(physical_memory_bytes() * DEFAULT_MEMORY_SHARE)


def _fmt_bytes(n: int) -> str:
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


# --------------------------------------------------------------------------------------
# Landlock: an optional file system allow-list, no root needed (Linux >= 5.13)
# --------------------------------------------------------------------------------------

_SYS_LANDLOCK_CREATE_RULESET = 444  # the same number on every architecture
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LL_VERSION = 1
_LL_RULE_PATH_BENEATH = 1
_LL_EXECUTE, _LL_WRITE_FILE, _LL_READ_FILE, _LL_READ_DIR = 1, 2, 4, 8
_LL_REFER, _LL_TRUNCATE = 1 << 13, 1 << 14
_LL_READ = _LL_EXECUTE | _LL_READ_FILE | _LL_READ_DIR
_LL_FILE_ONLY = _LL_EXECUTE | _LL_WRITE_FILE | _LL_READ_FILE | _LL_TRUNCATE
_LL_SCOPE_SIGNAL = 2


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


SYSTEM_READ_DIRS = (
    "/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/etc", "/opt", "/proc", "/sys", "/run",
)  # fmt: skip
"""Read (and execute) in `default_fs_access`: programs, libraries, configuration, CUDA."""
SYSTEM_WRITE_DIRS = ("/dev",)
"""Written in `default_fs_access`: /dev/null, /dev/shm, the GPU device files (opened O_RDWR)."""
CACHE_DIR_VARS = ("TRITON_CACHE_DIR", "CUDA_CACHE_PATH", "TORCHINDUCTOR_CACHE_DIR")
"""Cache directories the server's environment may name; `default_fs_access` makes them
writable so JIT caches keep working."""


@dataclass(frozen=True)
class FsAccess:
    """A Landlock allow-list: outside these trees the process can open nothing."""

    read: tuple[Path, ...]
    """Read, list and execute beneath each path."""
    write: tuple[Path, ...] = ()
    """Everything (create, write, remove, rename) beneath each path."""
    scope_signals: bool = True
    """Also forbid signalling processes outside the sandbox (Landlock ABI >= 6)."""


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is missing or disabled."""
    if _LIBC is None:
        return 0
    v = int(_LIBC.syscall(ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET), None, ctypes.c_size_t(0),
                          ctypes.c_uint32(_LL_VERSION)))  # fmt: skip
    return max(v, 0)


def default_fs_access(
    workdir: Path, *, read: Sequence[Path] = (), write: Sequence[Path] = ()
) -> FsAccess:
    """System directories and the Python installation (prefixes, site-packages, sys.path,
    PYTHONPATH) read-only, ``workdir`` read-only, /dev and the named JIT caches writable.

    `run_sandboxed` adds the job's private directory (HOME, TMPDIR) as writable.
    """
    py: set[str] = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    py.add(os.path.dirname(os.path.realpath(sys.executable)))
    py.update(site.getsitepackages())
    py.add(site.getusersitepackages())
    py.update(p for p in sys.path if os.path.isabs(p))
    py.update(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if os.path.isabs(p))
    caches = [os.environ[v] for v in CACHE_DIR_VARS if os.environ.get(v)]
    for cache in caches:  # a rule grants nothing for a path that does not exist yet
        with contextlib.suppress(OSError):
            Path(cache).mkdir(parents=True, exist_ok=True)
    reads = [Path(p) for p in (*SYSTEM_READ_DIRS, *sorted(py))]
    writes = [Path(p) for p in (*SYSTEM_WRITE_DIRS, *caches)]
    return FsAccess(read=(*reads, Path(workdir), *read), write=(*writes, *write))


def _landlock_check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def _landlock_ruleset(access: FsAccess) -> int:
    """A ruleset descriptor for ``access``; paths that do not exist grant nothing."""
    abi = landlock_abi()
    if abi < 1 or _LIBC is None:
        raise OSError(errno.ENOSYS, "Landlock is not available (Linux >= 5.13, lsm=landlock)")
    handled = (1 << 13) - 1 | (_LL_REFER if abi >= 2 else 0) | (_LL_TRUNCATE if abi >= 3 else 0)
    scoped = _LL_SCOPE_SIGNAL if access.scope_signals and abi >= 6 else 0
    attr = _RulesetAttr(handled, 0, scoped)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    fd = _landlock_check(
        int(
            _LIBC.syscall(
                ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET),
                ctypes.byref(attr),
                ctypes.c_size_t(size),
                ctypes.c_uint32(0),
            )
        ),
        "landlock_create_ruleset",
    )
    try:
        rules = [(p, _LL_READ) for p in access.read] + [(p, handled) for p in access.write]
        for path, rights in rules:
            try:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if not stat.S_ISDIR(os.fstat(pfd).st_mode):
                    rights &= _LL_FILE_ONLY
                rule = _PathBeneath(rights & handled, pfd)
                _landlock_check(
                    int(
                        _LIBC.syscall(
                            ctypes.c_long(_SYS_LANDLOCK_ADD_RULE),
                            ctypes.c_int(fd),
                            ctypes.c_int(_LL_RULE_PATH_BENEATH),
                            ctypes.byref(rule),
                            ctypes.c_uint32(0),
                        )
                    ),
                    f"landlock_add_rule {path}",
                )
            finally:
                os.close(pfd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _landlock_enforce(ruleset_fd: int) -> None:
    """Restrict the calling thread (and what it later forks or execs) to the ruleset."""
    assert _LIBC is not None
    _landlock_check(_prctl(_PR_SET_NO_NEW_PRIVS, 1), "PR_SET_NO_NEW_PRIVS")
    _landlock_check(
        int(
            _LIBC.syscall(
                ctypes.c_long(_SYS_LANDLOCK_RESTRICT_SELF),
                ctypes.c_int(ruleset_fd),
                ctypes.c_uint32(0),
            )
        ),
        "landlock_restrict_self",
    )


def restrict_this_process(access: FsAccess) -> None:
    """Apply ``access`` to this process, for a child that restricts itself (e.g. the
    contestant, after ncu has started it). Landlock binds the calling thread only, so call it
    while it is the only thread. Raises OSError when Landlock is unavailable."""
    if threading.active_count() != 1:
        raise RuntimeError("restrict_this_process: call it before any thread is started")
    fd = _landlock_ruleset(access)
    try:
        _landlock_enforce(fd)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------
# What is in force here (for the environment report)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SandboxMechanisms:
    """Which process controls `run_sandboxed` uses on this host."""

    parent_death: str
    """How a child dies with its parent."""
    descendants: str
    """How descendants that left the group are found at a job's end."""
    memory_limit_bytes: int
    """The default job limit (0: none)."""
    memory_limit_source: str
    """Where the limit comes from, or why it could not be read."""
    landlock_abi: int
    """Landlock ABI of the kernel (0: no file system allow-list possible)."""
    this_process_protected: bool
    """Whether this process is non-dumpable (`protect_this_process`)."""


def sandbox_mechanisms() -> SandboxMechanisms:
    """What `run_sandboxed` does on this host; never raises."""
    linux = _LIBC is not None
    try:
        limit = default_memory_limit()
        raw = os.environ.get(MEMORY_ENV, "").strip()
        source = f"{MEMORY_ENV}={raw}" if raw else f"{DEFAULT_MEMORY_SHARE:.0%} of RAM"
    except NsightCoreError as exc:
        limit, source = int(physical_memory_bytes() * DEFAULT_MEMORY_SHARE), str(exc)
    return SandboxMechanisms(
        parent_death="PR_SET_PDEATHSIG + parent pipe" if linux else "parent pipe",
        descendants=(
            "subreaper + /proc walk (group, session, parent links, job id)"
            if linux
            else "process group only"
        ),
        memory_limit_bytes=limit,
        memory_limit_source=source,
        landlock_abi=landlock_abi(),
        this_process_protected=linux and _prctl(_PR_GET_DUMPABLE) == 0,
    )


def _fsize_limit(file_size_bytes: int) -> tuple[int, int]:
    _soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    soft = file_size_bytes if hard == resource.RLIM_INFINITY else min(file_size_bytes, hard)
    return soft, hard


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _leader_exited(pid: int) -> bool:
    """True once the leader is a zombie; WNOWAIT leaves it unreaped so its pgid stays ours."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


_EXITED = "exited"
"""Selector key data of the leader's pidfd (the pipes' keys are "stdout" and "stderr")."""


class _Pipes:
    """Both output pipes of the child, read without blocking into their captures."""

    def __init__(self, proc: subprocess.Popen[bytes], limits: SandboxLimits) -> None:
        self.sel = selectors.DefaultSelector()
        self.caps = {
            "stdout": _Capture(limits.head_bytes, limits.tail_bytes),
            "stderr": _Capture(limits.head_bytes, limits.tail_bytes),
        }
        for name, stream in (("stdout", proc.stdout), ("stderr", proc.stderr)):
            assert stream is not None
            os.set_blocking(stream.fileno(), False)
            self.sel.register(stream, selectors.EVENT_READ, name)
        # The leader's exit wakes the wait too. Its pipes close before its exit ends (a
        # CUDA context is torn down after the files), and polling every poll interval for
        # the zombie then added up to 0.1 s to every job and to every judge's wait for its
        # contestant. Without pidfd_open (Linux < 5.3) the interval stays the bound.
        self._exit_fd: int | None = None
        with contextlib.suppress(AttributeError, OSError):
            self._exit_fd = os.pidfd_open(proc.pid)
            self.sel.register(self._exit_fd, selectors.EVENT_READ, _EXITED)

    def pump(self, timeout: float) -> None:
        """Read what is there, waiting at most ``timeout`` for something to arrive (or for
        the leader to exit)."""
        if not self.sel.get_map():
            time.sleep(timeout)
            return
        for key, _ in self.sel.select(timeout):
            if key.data == _EXITED:  # readable once the leader has exited: the caller looks
                self._close_exit_fd()
                continue
            try:
                data = os.read(key.fd, _READ_CHUNK)
            except BlockingIOError:
                continue
            if data:
                self.caps[key.data].feed(data)
            else:
                self.sel.unregister(key.fileobj)

    def drain(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while self.sel.get_map() and time.monotonic() < end:
            self.pump(min(0.05, max(0.0, end - time.monotonic())))

    def _close_exit_fd(self) -> None:
        if self._exit_fd is not None:
            self.sel.unregister(self._exit_fd)
            os.close(self._exit_fd)
            self._exit_fd = None

    def close(self) -> None:
        self._close_exit_fd()
        self.sel.close()


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
    pipes: _Pipes,
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
            end.peak_rss = max(end.peak_rss, rss := _job_rss(proc.pid))
            if rss > end.memory_limit:
                end.out_of_memory = True
                return end
        if term_at is None and now >= deadline:
            end.timed_out = True
            term_at = now
            _signal_group(proc.pid, signal.SIGTERM)
        elif term_at is not None and now >= term_at + limits.kill_grace_s:
            return end
        if poll is not None and due:
            poll()


def _save_stream(cap: StreamCapture, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.write(cap.head)
        if cap.omitted_bytes:
            f.write(f"\n[... {cap.omitted_bytes} bytes omitted ...]\n".encode())
        f.write(cap.tail)
    return path


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
    outer = os.environ.get(JOB_MARKER_ENV, "")
    child_env[JOB_MARKER_ENV] = f"{outer} {token}".strip()
    watch_r, watch_w = os.pipe()  # both ends close-on-exec; only watch_r is passed on
    child_env[PARENT_FD_ENV] = str(watch_r)
    landlock_fd = -1
    try:
        try:
            if fs_access is not None:
                landlock_fd = _landlock_ruleset(
                    FsAccess(
                        read=(*fs_access.read, cwd),
                        write=(*fs_access.write, tmp),
                        scope_signals=fs_access.scope_signals,
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
            return _not_started(argv, exc, tmp if keep_tmp else None, time.monotonic() - start)
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
        files["stdout"] = _save_stream(captures["stdout"], output_dir / STDOUT_FILE)
        files["stderr"] = _save_stream(captures["stderr"], output_dir / STDERR_FILE)
    code = proc.returncode
    signame = _signal_name(-code) if code < 0 else None
    error_class, message, hint = classify_end(
        exit_code=None if code < 0 else code,
        signal_name=signame,
        timed_out=end.timed_out,
        cancelled=end.cancelled,
        wall_limit_s=deadline.limit_s if deadline is not None else limits.wall_s,
        stdout=captures["stdout"],
        stderr=captures["stderr"],
        exit_classes=table,
        out_of_memory=end.out_of_memory,
        peak_rss_bytes=end.peak_rss,
        memory_limit_bytes=end.memory_limit,
    )
    return SandboxOutcome(
        argv=argv,
        exit_code=None if code < 0 else code,
        signal_name=signame,
        timed_out=end.timed_out,
        cancelled=end.cancelled,
        wall_s=wall,
        stdout=captures["stdout"],
        stderr=captures["stderr"],
        error_class=error_class,
        message=message,
        hint=hint,
        tmp_dir=tmp,
        output_files=files,
        out_of_memory=end.out_of_memory,
        peak_rss_bytes=end.peak_rss,
        memory_limit_bytes=end.memory_limit,
        strays_killed=end.strays_killed,
    )


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
    pipes = _Pipes(proc, limits)
    try:
        _supervise(proc, pipes, limits, cancel, poll, start, end, deadline)
    finally:
        # Whatever happened (also an exception from poll), no process of the job survives:
        # the group, and every descendant or carrier of the job id outside it.
        # The leader is still unreaped here, so proc.pid is still this group's id.
        end.strays_killed = _kill_job(proc.pid, token.encode())
        proc.wait()
        pipes.drain(_DRAIN_S)
        pipes.close()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    return {name: cap.result() for name, cap in pipes.caps.items()}


def _not_started(
    argv: list[str], exc: OSError | subprocess.SubprocessError, tmp: Path | None, wall: float
) -> SandboxOutcome:
    empty = StreamCapture(b"", b"", 0, 0)
    return SandboxOutcome(
        argv=argv,
        exit_code=None,
        signal_name=None,
        timed_out=False,
        cancelled=False,
        wall_s=wall,
        stdout=empty,
        stderr=empty,
        error_class=ErrorClass.CRASHED,
        message=f"could not start {argv[0]!r}: {getattr(exc, 'strerror', None) or exc}",
        hint="check that the program exists on PATH and is executable",
        tmp_dir=tmp,
    )


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


_SIGNAL_HINTS = {
    "SIGSEGV": "an invalid memory access (out-of-bounds pointer, use after free) in native code",
    "SIGBUS": "a misaligned or unmapped memory access in native code",
    "SIGABRT": "abort(): a failed assertion or a fatal CUDA/C++ error; see the stderr tail",
    "SIGFPE": "an arithmetic fault in native code (integer division by zero)",
    "SIGILL": "an illegal instruction: code built for another CPU",
    "SIGKILL": "killed from outside, often by the out-of-memory killer",
    "SIGXFSZ": "a file grew past the sandbox's file size limit",
    "SIGTERM": "terminated from outside",
}


def _tail_block(stdout: StreamCapture, stderr: StreamCapture, n: int = 20) -> str:
    parts = []
    for label, cap in (("stderr", stderr), ("stdout", stdout)):
        lines = cap.last_lines(n)
        if lines:
            parts.append(f"last {label} lines:\n" + "\n".join(line[:500] for line in lines))
    return "\n".join(parts)


def classify_end(
    *,
    exit_code: int | None,
    signal_name: str | None,
    timed_out: bool,
    cancelled: bool,
    wall_limit_s: float,
    stdout: StreamCapture,
    stderr: StreamCapture,
    exit_classes: Mapping[int, ErrorClass | None],
    out_of_memory: bool = False,
    peak_rss_bytes: int = 0,
    memory_limit_bytes: int = 0,
) -> tuple[ErrorClass | None, str, str]:
    """(class, message, hint) for how a process ended: the one such mapping in the project."""
    tail = _tail_block(stdout, stderr)
    with_tail = (lambda m: f"{m}\n{tail}") if tail else (lambda m: m)
    if cancelled:
        return ErrorClass.CANCELLED, "cancelled; the process group was killed", ""
    if out_of_memory:
        return (
            ErrorClass.OUT_OF_MEMORY,
            with_tail(
                f"resident memory reached {_fmt_bytes(peak_rss_bytes)} ({peak_rss_bytes} bytes, "
                f"summed over the job's processes), past the {_fmt_bytes(memory_limit_bytes)} "
                "limit; the process group was killed"
            ),
            f"use smaller inputs or fewer configs, or raise {MEMORY_ENV} (e.g. 75%)",
        )
    if timed_out:
        return (
            ErrorClass.TIMEOUT,
            with_tail(
                f"still running after the {wall_limit_s:g} s limit; the process group was killed"
            ),
            "raise time_limit_s, or fix the hang the last output lines point to",
        )
    if signal_name is not None:
        return (
            ErrorClass.CRASHED,
            with_tail(f"killed by {signal_name}"),
            _SIGNAL_HINTS.get(signal_name, "the process died of a signal"),
        )
    if exit_code is None or exit_code == 0:
        return None, "", ""
    if exit_code in exit_classes:
        mapped = exit_classes[exit_code]
        if mapped is None:
            return None, "", ""
        return mapped, with_tail(f"exited with code {exit_code} ({mapped.value})"), ""
    hint = "the process exited without reporting; read the stderr tail"
    if 128 < exit_code < 128 + 65:
        # A shell or launcher reports a child's death by signal N as 128 + N.
        hint = f"code {exit_code} is what launchers report for {_signal_name(exit_code - 128)}"
    return ErrorClass.CRASHED, with_tail(f"exited with unexpected code {exit_code}"), hint


def process_age_s() -> float:
    """Seconds since this process started (Linux /proc; 0.0 elsewhere): the interpreter's
    start and our imports belong to the job's timeline too."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot_s = time.clock_gettime(time.CLOCK_BOOTTIME)
        return max(0.0, boot_s - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0
