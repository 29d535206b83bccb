"""Ranges named like the reference's runs, padded with the reference's own kernel.

Hack: forged ranges. The candidate shares the process that opens the NVTX ranges, and ncu
  attributes a kernel to a run by its range's name: a thread started at import keeps
  opening start/end ranges in domain 'nspy' named like the reference's timed runs
  (``c0:r<run>:_reference.py:softmax``) and launches the reference's kernel in them, so the
  reference's runs hold more kernels (with `combine: sum`, more time) and every candidate
  looks faster. The candidate itself is correct.
Expect: pass
Expect trust ncu: suspicious, failed
Expect trust cupti: suspicious, failed
Expect trust events: ok, noisy, suspicious
Expect trust: ok, noisy
Runs alone: its thread's kernels land in the calls of whatever runs beside it.
Defence: every range name carries the judge's nonce of its call, and ranges must come in
  the order the judge issued the calls: a kernel in a range the judge never issued (or in
  two runs' ranges at once) is dropped from every run's values and the rows of the call
  window it falls in are suspicious (collectors/ranges.py); where the drop leaves runs with
  different kernel counts, the rows fail and the failure names the finding. Under events and cupti ranges
  mean nothing: the thread's work only slows the candidate's own calls; cupti names a
  thread that launches kernels between calls (suspicious), and events may see its work
  after a call's window. On CPU no thread starts (there is no NVTX tool to fool).
"""

from __future__ import annotations

import threading
import time

import torch


def _pad() -> None:
    import nvtx

    x = torch.randn(32, 64, device="cuda")
    while True:
        for run in range(3):
            rid = nvtx.start_range(message=f"c0:r{run}:_reference.py:softmax", domain="nspy")
            torch.softmax(x, dim=-1)
            torch.cuda.synchronize()
            nvtx.end_range(rid)
        time.sleep(0.001)


if torch.cuda.is_available():
    threading.Thread(target=_pad, daemon=True).start()


def candidate(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)
