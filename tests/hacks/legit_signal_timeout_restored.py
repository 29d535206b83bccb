"""Control: a timeout guard armed and taken back inside the call.

Hack: none (control); the honest twin of after_window_signal_timer. The candidate arms a
  SIGALRM timeout around its work, as a watchdog would, and before it returns disarms the
  timer and puts the previous handler back. Its output is complete when it returns.
Expect: pass
Expect trust: ok, noisy
Defence: must pass: the guard (contestant/signal_guard.py) finds no timer armed and every
  handler as the harness left it, so it names nothing.
"""

from __future__ import annotations

import signal
from types import FrameType

import torch


def _too_slow(signum: int, frame: FrameType | None) -> None:
    raise TimeoutError("softmax took over 10 s")


def candidate(x: torch.Tensor) -> torch.Tensor:
    previous = signal.signal(signal.SIGALRM, _too_slow)
    signal.setitimer(signal.ITIMER_REAL, 10.0)
    try:
        return torch.softmax(x, dim=-1)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, previous)
