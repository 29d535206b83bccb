"""A child's output: read through pipes without blocking, kept as a capped head and tail.

Separate from the runner because it is the part that bounds memory whatever the child
prints: the bytes between head and tail are counted, never stored, and a saved copy is
capped the same way.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from nsight_core.processes.sandbox.limits import SandboxLimits

_READ_CHUNK = 65536


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


_EXITED = "exited"
"""Selector key data of the leader's pidfd (the pipes' keys are "stdout" and "stderr")."""


class Pipes:
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


def save_stream(cap: StreamCapture, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.write(cap.head)
        if cap.omitted_bytes:
            f.write(f"\n[... {cap.omitted_bytes} bytes omitted ...]\n".encode())
        f.write(cap.tail)
    return path
