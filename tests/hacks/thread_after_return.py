"""A thread finishes the output after the call returned.

Hack: work outside the timed window. The candidate computes the first half of the rows
  itself and leaves the second half to a thread it starts and never joins: the call returns
  early, its window (host clock or CUDA events) closes early, and the thread finishes
  while the harness checks and copies the output. On a CPU the thread first sleeps 5 ms,
  standing for work that outlasts the call. Honest twin: legit_side_thread (the same
  thread, joined).
Expect: incorrect or pass
Expect trust: suspicious
Runs alone: its thread's work, after the call returned, would land in other candidates' calls.
Defence: the output is copied as the window left it and compared with what it is once it
  is in the judge's slot; any difference means part of it was written after the call
  returned (incorrect). On a CPU the host-clock timer first waits for the threads the call
  started (up to 0.2 s), so the difference is there to see; their time after the return is
  work after the window too. On a GPU the thread's kernels, launched after the call
  returned, land after the window's end event (events), or are kernels another thread
  launched between calls (cupti), or kernels outside the timed ranges (ncu); if they run
  after the harness's copy, the judge's slot holds half an output. So it fails its check,
  or passes with its rows suspicious (on a CPU it always fails: the timer waits for the
  thread before reading the output back).
"""

from __future__ import annotations

import threading
import time

import torch


def candidate(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    half = x.shape[0] // 2
    out[:half] = torch.softmax(x[:half], dim=-1)

    def rest() -> None:
        if not x.is_cuda:
            time.sleep(0.005)
        out[half:] = torch.softmax(x[half:], dim=-1)

    threading.Thread(target=rest, daemon=True).start()
    return out
