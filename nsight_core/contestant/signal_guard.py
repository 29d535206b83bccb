"""Signal handlers and interval timers a call leaves behind, taken back before the harness
reads its output.

A Python signal handler runs in the main thread at the next bytecode after its signal
arrives, wherever the interpreter is: a timer the call armed (``signal.setitimer``,
``signal.alarm``), or a signal a helper process sends later, would run the candidate's code
inside the harness after the timed window, where it could finish the output. So:

- at the call's tail, inside the window (`disarm_real`, from `Guarded._seal`), the
  wall-clock timer (``ITIMER_REAL``, which ``alarm`` sets too) is disarmed: one system call
  (about 0.3 us on a GPU host, 2.4 us on a sandboxed 2-core VM), since between the
  window's end and the harness's hold on the output even a 20 us timer fires on a slow host;
- right after the timer's end read (`take_back`, from `Guarded.settle`), the CPU-time
  timers are disarmed and every handler that is not the harness's own is put back.

Each is named and fails the call; a signal still pending then reaches the harness's
handler. What is left (docs/correctness.md): a CPU-time timer or another process's signal
that lands in the few microseconds between the window's end and `take_back`, on every
checked call. Blocking signals instead would not do: a thread that does not block them
takes the signal and the main thread still runs the Python handler.
"""

from __future__ import annotations

import importlib
import signal
from collections.abc import Callable
from typing import Any

_REAL = "an interval timer armed (signal.setitimer(ITIMER_REAL) or signal.alarm)"
_CPU_TIMERS = (
    ("ITIMER_VIRTUAL", "signal.setitimer(ITIMER_VIRTUAL)"),
    ("ITIMER_PROF", "signal.setitimer(ITIMER_PROF)"),
)


class SignalGuard:
    """The harness's handlers, kept before any candidate is imported, and the functions that
    read and restore them (bound then, so a candidate's rebinding changes nothing)."""

    def __init__(self) -> None:
        # The C functions: `signal.getsignal` wraps its answer in an enum in Python, about
        # 3.5 us a signal; this one takes 0.1 us, so the scan of every signal costs a call
        # about 7 us (outside the window).
        c_signal: Any = importlib.import_module("_signal")  # signal's C half: no stubs
        self._getsignal: Callable[[int], Any] = c_signal.getsignal
        self._signal: Callable[[int, Any], Any] = c_signal.signal
        self._getitimer: Callable[[int], tuple[float, float]] = signal.getitimer
        self._setitimer: Callable[[int, float], tuple[float, float]] = signal.setitimer
        self._real: int = signal.ITIMER_REAL
        self._default: int = int(signal.SIG_DFL)
        self._timers = tuple(
            (getattr(signal, name), how) for name, how in _CPU_TIMERS if hasattr(signal, name)
        )
        self._handlers: tuple[tuple[int, Any], ...] = ()
        self.bind()

    def bind(self) -> None:
        """Keep the handlers as they are now (a framework imported since may have set its
        own): call it before any candidate is imported."""
        kept = []
        for sig in sorted(signal.valid_signals()):
            if sig in (signal.SIGKILL, signal.SIGSTOP):
                continue
            try:
                kept.append((int(sig), self._getsignal(sig)))
            except (OSError, ValueError):  # not a signal this platform lets Python handle
                continue
        self._handlers = tuple(kept)

    def disarm_real(self) -> bool:
        """Inside the window, at the call's tail: the wall-clock timer off; whether it was
        armed (one system call answers both)."""
        return self._setitimer(self._real, 0.0) != (0.0, 0.0)

    def take_back(self, keep: list[object], real_was_armed: bool) -> list[str]:
        """Disarm the CPU-time timers and restore the handlers the call left; what was found
        (``real_was_armed``: `disarm_real`'s answer for this call, too), in words. ``keep``
        holds the candidate's handlers until the call is released."""
        found = [_REAL] if real_was_armed else []
        for which, how in self._timers:
            if self._getitimer(which) != (0.0, 0.0):
                self._setitimer(which, 0.0)
                found.append(f"an interval timer armed ({how})")
        for sig, handler in self._handlers:
            now = self._getsignal(sig)
            if now is handler:  # identity: a candidate's handler may define __eq__
                continue
            try:  # a handler set outside Python (None) comes back as the default
                self._signal(sig, self._default if handler is None else handler)
            except ValueError:  # only the main thread may set handlers
                found.append(f"a handler for signal {sig} that the harness could not restore")
                continue
            keep.append(now)
            found.append(f"a handler for signal {sig} set (signal.signal)")
        return found
