"""A signal handler finishes the output after the call returned.

Hack: work after the timed window, run by a signal. The candidate computes the first half
  of the rows, installs a SIGALRM handler that computes the second half once the call has
  returned, and arms an interval timer that fires every 20 microseconds: the handler runs in
  the main thread at the next bytecode, inside the harness as it reads the output after the
  window, then disarms the timer and puts the default handler back, so the copies would
  read a whole output that was half timed, and nothing would be left to see.
  Honest twin: legit_signal_timeout_restored (a timeout guard armed and disarmed inside the
  call, its handler put back before it returns).
Expect: incorrect
Expect reasons: interval timer
Defence: right after the timer's end read the call's guard disarms every interval timer the
  call left armed and puts back every signal handler that is not the harness's own
  (contestant/signal_guard.py), names both and fails the call; the judge reads half the
  rows.
"""

from __future__ import annotations

import signal
from types import FrameType

import torch


def candidate(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    half = x.shape[0] // 2
    out[:half] = torch.softmax(x[:half], dim=-1)
    returned = False

    def finish(signum: int, frame: FrameType | None) -> None:
        if not returned:
            return
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        out[half:] = torch.softmax(x[half:], dim=-1)

    signal.signal(signal.SIGALRM, finish)
    signal.setitimer(signal.ITIMER_REAL, 2e-5, 2e-5)
    returned = True
    return out
