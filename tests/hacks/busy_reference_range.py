"""Padding the reference's ranges: a thread started at import keeps launching work.

Hack: inflating the baseline from the side. The reference is timed in the candidate's
  process, and ncu's ranges are process-wide in time, so a daemon thread that the
  candidate's module starts at import and that keeps launching kernels (here a prefix sum)
  puts its kernels into the reference's ranges: with `combine: sum` they add to the
  reference's time, and every candidate looks faster. The candidate itself is correct.
Expect: pass
Expect trust: ok, noisy, failed
Expect trust ncu: suspicious, failed
Expect reference kernels: softmax
Runs alone: its thread would run through the other candidates' calls too.
Defence: the contestant imports only the reference at start; the judge runs every call of
  the reference, on every config, and only then asks for the candidates. No candidate code
  exists in the process while the reference is timed, so its rows hold its own kernels only.
  The thread does land in the candidate's own ranges: under ncu its rows may fail (a varying
  number of foreign kernels per run), and its kernels between the calls are foreign work
  that makes them suspicious (collectors/ranges.py); under cupti its rows are suspicious
  (kernels launched by another thread between calls: tests/gpu).
"""

from __future__ import annotations

import threading
import time

import torch


def _pad() -> None:
    x = torch.ones(1 << 16, device="cuda" if torch.cuda.is_available() else "cpu")
    while True:
        torch.cumsum(x, dim=0)
        time.sleep(0.0005)


threading.Thread(target=_pad, daemon=True).start()


def candidate(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)
