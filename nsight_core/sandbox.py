"""Start, limit and end processes: the only module that spawns or kills.

Stdlib-only (plus `nsight_core.errors`), so tools on a bare GPU host can use it.
`run_sandboxed` runs a job; `run_command` runs a short external command (ncu, nvidia-smi)
under the same contract with output kept whole.

Contract of `run_sandboxed`:

- The child gets its own session and process group (``start_new_session``); every signal
  goes to the whole group (``killpg``), so grandchildren such as ncu's target die too.
  The group leader is not reaped until the group has been sent SIGKILL, so its id cannot
  be recycled under us. A grandchild that calls ``setsid()`` itself escapes; nothing here
  claims otherwise.
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
  later (or as soon as the leader is gone), so a job ends within limit + grace.
  ``cancel`` is checked every ``limits.poll_interval_s``; when set the group gets SIGKILL
  at once. ``poll`` is called at the same pace so the caller can tail progress files.
- When `run_sandboxed` returns, the whole group has been sent SIGKILL and the leader reaped,
  also when ``poll`` raises or the caller is interrupted.
- The outcome's `ErrorClass` is decided here and nowhere else: cancelled, then timeout
  (with the last output lines), then a signal (crashed, with its name), then the exit
  code through ``exit_classes`` (the worker's `WORKER_EXIT_CLASS` by default); any other
  non-zero code is crashed, with the stderr tail.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import os
import resource
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nsight_core.errors import WORKER_EXIT_CLASS, ErrorClass, NsightCoreError

STDOUT_FILE = "stdout.txt"
"""Name of the capped stdout copy that `run_sandboxed` saves in ``output_dir``."""
STDERR_FILE = "stderr.txt"
"""Name of the capped stderr copy that `run_sandboxed` saves in ``output_dir``."""

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
    """How often cancel is checked and ``poll`` is called."""

    def __post_init__(self) -> None:
        if self.wall_s <= 0 or self.kill_grace_s < 0 or self.poll_interval_s <= 0:
            raise ValueError("SandboxLimits: wall_s and poll_interval_s > 0, kill_grace_s >= 0")
        if self.head_bytes < 0 or self.tail_bytes < 0 or self.file_size_bytes <= 0:
            raise ValueError("SandboxLimits: byte caps must be non-negative")


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


def _fsize_limit(file_size_bytes: int) -> tuple[int, int]:
    _soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    soft = file_size_bytes if hard == resource.RLIM_INFINITY else min(file_size_bytes, hard)
    return soft, hard


def _limit_child(fsize: tuple[int, int]) -> None:
    # Runs in the child between fork and exec, possibly forked from a threaded server:
    # keep it to two system calls on precomputed values (no imports, no locks).
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, fsize)


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

    def pump(self, timeout: float) -> None:
        """Read what is there, waiting at most ``timeout`` for something to arrive."""
        if not self.sel.get_map():
            time.sleep(timeout)
            return
        for key, _ in self.sel.select(timeout):
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

    def close(self) -> None:
        self.sel.close()


@dataclass
class _End:
    timed_out: bool = False
    cancelled: bool = False


def _supervise(
    proc: subprocess.Popen[bytes],
    pipes: _Pipes,
    limits: SandboxLimits,
    cancel: threading.Event | None,
    poll: Callable[[], None] | None,
    start: float,
) -> _End:
    """Pump output until the leader exits, the limit passes, or cancel is set."""
    end = _End()
    deadline = start + limits.wall_s
    term_at: float | None = None
    next_poll = start + limits.poll_interval_s
    while True:
        now = time.monotonic()
        wake = min(next_poll, deadline if term_at is None else term_at + limits.kill_grace_s)
        pipes.pump(max(0.0, min(limits.poll_interval_s, wake - now)))
        now = time.monotonic()
        if _leader_exited(proc.pid):
            return end
        if cancel is not None and cancel.is_set():
            end.cancelled = True
            return end
        if term_at is None and now >= deadline:
            end.timed_out = True
            term_at = now
            _signal_group(proc.pid, signal.SIGTERM)
        elif term_at is not None and now >= term_at + limits.kill_grace_s:
            return end
        if poll is not None and now >= next_poll:
            next_poll = now + limits.poll_interval_s
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
) -> SandboxOutcome:
    """Run ``argv`` to its end under the contract of this module; never raises for the child.

    ``env`` holds extras on top of the allowlisted environment. ``exit_classes`` maps exit
    codes to classes (default: the worker's codes); 0 always means success. ``pass_fds``
    are descriptors the child inherits (all others are closed), e.g. a pipe's write end.
    """
    argv = [str(a) for a in argv]
    table: Mapping[int, ErrorClass | None] = (
        exit_classes
        if exit_classes is not None
        else {int(k): v for k, v in WORKER_EXIT_CLASS.items()}
    )
    tmp = Path(tempfile.mkdtemp(prefix="nspy-job-"))
    start = time.monotonic()
    try:
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=build_env(env, home=tmp),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
                pass_fds=tuple(pass_fds),
                preexec_fn=functools.partial(_limit_child, _fsize_limit(limits.file_size_bytes)),
            )
        except OSError as exc:
            return _not_started(argv, exc, tmp if keep_tmp else None, time.monotonic() - start)
        end, captures = _run_started(proc, limits, cancel, poll, start)
        wall = time.monotonic() - start
    finally:
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
        wall_limit_s=limits.wall_s,
        stdout=captures["stdout"],
        stderr=captures["stderr"],
        exit_classes=table,
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
) -> tuple[_End, dict[str, StreamCapture]]:
    pipes = _Pipes(proc, limits)
    try:
        end = _supervise(proc, pipes, limits, cancel, poll, start)
    finally:
        # Whatever happened (also an exception from poll), no member of the group survives.
        # The leader is still unreaped here, so proc.pid is still this group's id.
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
        pipes.drain(_DRAIN_S)
        pipes.close()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    return end, {name: cap.result() for name, cap in pipes.caps.items()}


def _not_started(argv: list[str], exc: OSError, tmp: Path | None, wall: float) -> SandboxOutcome:
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
        message=f"could not start {argv[0]!r}: {exc.strerror or exc}",
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
) -> tuple[ErrorClass | None, str, str]:
    """(class, message, hint) for how a process ended: the one such mapping in the project."""
    tail = _tail_block(stdout, stderr)
    with_tail = (lambda m: f"{m}\n{tail}") if tail else (lambda m: m)
    if cancelled:
        return ErrorClass.CANCELLED, "cancelled; the process group was killed", ""
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
