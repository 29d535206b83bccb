"""How a sandboxed process ended, and the one mapping from that end to an `ErrorClass`.

The contract says the outcome's class is decided in one place: `classify_end` is it, with
the record it fills and the hints that name what a signal usually means.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.processes.sandbox.memory import MEMORY_ENV, fmt_bytes
from nsight_core.processes.sandbox.output import StreamCapture


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


def not_started(
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


def name_of_signal(signum: int) -> str:
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
    ended: SandboxOutcome, *, wall_limit_s: float, exit_classes: Mapping[int, ErrorClass | None]
) -> tuple[ErrorClass | None, str, str]:
    """(class, message, hint) for how ``ended`` ended, whatever class it holds so far: the
    one such mapping in the project."""
    tail = _tail_block(ended.stdout, ended.stderr)
    with_tail = (lambda m: f"{m}\n{tail}") if tail else (lambda m: m)
    if ended.cancelled:
        return ErrorClass.CANCELLED, "cancelled; the process group was killed", ""
    if ended.out_of_memory:
        return (
            ErrorClass.OUT_OF_MEMORY,
            with_tail(
                f"resident memory reached {fmt_bytes(ended.peak_rss_bytes)} ({ended.peak_rss_bytes} bytes, "
                f"summed over the job's processes), past the {fmt_bytes(ended.memory_limit_bytes)} "
                "limit; the process group was killed"
            ),
            f"use smaller inputs or fewer configs, or raise {MEMORY_ENV} (e.g. 75%)",
        )
    if ended.timed_out:
        return (
            ErrorClass.TIMEOUT,
            with_tail(
                f"still running after the {wall_limit_s:g} s limit; the process group was killed"
            ),
            "raise time_limit_s, or fix the hang the last output lines point to",
        )
    if ended.signal_name is not None:
        return (
            ErrorClass.CRASHED,
            with_tail(f"killed by {ended.signal_name}"),
            _SIGNAL_HINTS.get(ended.signal_name, "the process died of a signal"),
        )
    if ended.exit_code is None or ended.exit_code == 0:
        return None, "", ""
    if ended.exit_code in exit_classes:
        mapped = exit_classes[ended.exit_code]
        if mapped is None:
            return None, "", ""
        return mapped, with_tail(f"exited with code {ended.exit_code} ({mapped.value})"), ""
    hint = "the process exited without reporting; read the stderr tail"
    if 128 < ended.exit_code < 128 + 65:
        # A shell or launcher reports a child's death by signal N as 128 + N.
        hint = f"code {ended.exit_code} is what launchers report for {name_of_signal(ended.exit_code - 128)}"
    return ErrorClass.CRASHED, with_tail(f"exited with unexpected code {ended.exit_code}"), hint
