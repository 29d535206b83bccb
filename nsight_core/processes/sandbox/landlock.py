"""Landlock: an optional file system allow-list for a child, no root needed (Linux >= 5.13).

Its own module because it is a small kernel interface of its own (system call numbers,
structures, access rights by ABI version) that the runner applies before exec and a
contestant applies to itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import site
import stat
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nsight_core.processes.sandbox.env import inherited_paths, inherited_pythonpath
from nsight_core.processes.sandbox.this_process import LIBC, PR_SET_NO_NEW_PRIVS, prctl

_SYS_LANDLOCK_CREATE_RULESET = 444  # the same number on every architecture
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LL_VERSION = 1
_LL_RULE_PATH_BENEATH = 1
_LL_EXECUTE, _LL_WRITE_FILE, _LL_READ_FILE, _LL_READ_DIR = 1, 2, 4, 8
_LL_REFER, _LL_TRUNCATE = 1 << 13, 1 << 14
_LL_READ = _LL_EXECUTE | _LL_READ_FILE | _LL_READ_DIR
_LL_OPEN_RW = _LL_READ | _LL_WRITE_FILE | _LL_TRUNCATE  # no make, remove or rename
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
SYSTEM_WRITE_DIRS: tuple[str, ...] = ()
"""Written whole in `default_fs_access`: none. /dev is read; only the device files below are
written, so nothing can be created in /dev/shm (see `SHARED_MEMORY_DIRS`)."""
DEVICE_FILES = (
    "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty",
    "/dev/kfd", "/dev/dri", "/dev/nvidia-caps", "/dev/nvidia-caps-imex-channels",
)  # fmt: skip
"""Opened for writing in `default_fs_access` (with every /dev/nvidia* file: the GPU device
files are opened O_RDWR); a path that does not exist grants nothing."""
SHARED_MEMORY_DIRS = ("/dev/shm",)
"""POSIX shared memory: files that already exist there may be opened for reading and
writing (CUDA IPC's and torch's reference counts of a tensor shared by another process),
but nothing may be created, removed or renamed: a file a job left there would outlive the
job and reach the next one."""
CACHE_DIR_VARS = (
    "TRITON_CACHE_DIR",
    "CUDA_CACHE_PATH",
    "TORCHINDUCTOR_CACHE_DIR",
    "TORCH_EXTENSIONS_DIR",
)
"""Cache directories the server's environment may name; `default_fs_access` makes them
writable so JIT caches keep working."""


@dataclass(frozen=True)
class FsAccess:
    """A Landlock allow-list: outside these trees the process can open nothing."""

    read: tuple[Path, ...]
    """Read, list and execute beneath each path."""
    write: tuple[Path, ...] = ()
    """Everything (create, write, remove, rename) beneath each path."""
    open_existing: tuple[Path, ...] = ()
    """Read, and write files that exist, beneath each path; create, remove, rename nothing."""
    scope_signals: bool = True
    """Also forbid signalling processes outside the sandbox (Landlock ABI >= 6)."""


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is missing or disabled."""
    if LIBC is None:
        return 0
    v = int(LIBC.syscall(ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET), None, ctypes.c_size_t(0),
                          ctypes.c_uint32(_LL_VERSION)))  # fmt: skip
    return max(v, 0)


def default_fs_access(
    workdir: Path, *, read: Sequence[Path] = (), write: Sequence[Path] = ()
) -> FsAccess:
    """System directories, /dev and the Python installation (prefixes, site-packages,
    sys.path, PYTHONPATH) read-only, ``workdir`` read-only, the device files and the named
    JIT caches writable, files that exist in /dev/shm open for writing (`SHARED_MEMORY_DIRS`).

    `run_sandboxed` adds the job's private directory (HOME, TMPDIR) as writable.
    """
    py: set[str] = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    py.add(os.path.dirname(os.path.realpath(sys.executable)))
    py.update(site.getsitepackages())
    py.add(site.getusersitepackages())
    py.update(p for p in sys.path if os.path.isabs(p))
    py.update(inherited_pythonpath())
    caches = inherited_paths(CACHE_DIR_VARS)
    for cache in caches:  # a rule grants nothing for a path that does not exist yet
        with contextlib.suppress(OSError):
            Path(cache).mkdir(parents=True, exist_ok=True)
    reads = [Path(p) for p in (*SYSTEM_READ_DIRS, "/dev", *sorted(py))]
    writes = [Path(p) for p in (*SYSTEM_WRITE_DIRS, *device_files(), *caches)]
    shm = tuple(Path(p) for p in SHARED_MEMORY_DIRS)
    return FsAccess(read=(*reads, Path(workdir), *read), write=(*writes, *write), open_existing=shm)


def device_files() -> list[str]:
    """`DEVICE_FILES` and the GPU's device files present now (/dev/nvidia0, nvidiactl,
    nvidia-uvm, ...)."""
    try:
        gpus = sorted(str(p) for p in Path("/dev").glob("nvidia*"))
    except OSError:
        gpus = []
    return [*DEVICE_FILES, *(g for g in gpus if g not in DEVICE_FILES)]


def _landlock_check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def landlock_ruleset(access: FsAccess) -> int:
    """A ruleset descriptor for ``access``; paths that do not exist grant nothing."""
    abi = landlock_abi()
    if abi < 1 or LIBC is None:
        raise OSError(errno.ENOSYS, "Landlock is not available (Linux >= 5.13, lsm=landlock)")
    handled = (1 << 13) - 1 | (_LL_REFER if abi >= 2 else 0) | (_LL_TRUNCATE if abi >= 3 else 0)
    scoped = _LL_SCOPE_SIGNAL if access.scope_signals and abi >= 6 else 0
    attr = _RulesetAttr(handled, 0, scoped)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    fd = _landlock_check(
        int(
            LIBC.syscall(
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
        rules += [(p, _LL_OPEN_RW) for p in access.open_existing]
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
                        LIBC.syscall(
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


def landlock_enforce(ruleset_fd: int) -> None:
    """Restrict the calling thread (and what it later forks or execs) to the ruleset."""
    assert LIBC is not None
    _landlock_check(prctl(PR_SET_NO_NEW_PRIVS, 1), "PR_SET_NO_NEW_PRIVS")
    _landlock_check(
        int(
            LIBC.syscall(
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
    fd = landlock_ruleset(access)
    try:
        landlock_enforce(fd)
    finally:
        os.close(fd)
