"""Ending the harness's range early: the call's work runs after its timed range closed.

Hack: forged or ended ranges. The candidate shares the process that opens the NVTX ranges:
  it finds the harness's open range on its call stack, ends it, and only then computes, so
  ncu's time for the call holds none of its kernels.
Expect: pass
Expect trust ncu: suspicious, failed
Expect trust: ok, noisy
Runs alone: its kernels outside any range would make the rows of the calls around them
  suspicious too.
Defence: a request job's contestant runs under ncu with every kernel profiled but those of
  the harness's untimed calls; a kernel in no timed range is foreign work, and the rows of
  the call window it falls in are suspicious (collectors/ranges.py); with no kernel left in
  its ranges the rows fail (no_kernels) and the failure names the finding. Under events and
  cupti, and on CPU, no range is open: the candidate computes inside its call and is timed
  in full.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import torch


def _end_harness_range() -> None:
    frame: Any = sys._getframe(1)
    while frame is not None:
        rid, name = frame.f_locals.get("rid"), frame.f_locals.get("name")
        if rid is not None and isinstance(name, str) and not name.startswith("u:"):
            with contextlib.suppress(Exception):
                import nvtx

                nvtx.end_range(rid)
            return
        frame = frame.f_back


def candidate(x: torch.Tensor) -> torch.Tensor:
    _end_harness_range()
    return torch.softmax(x, dim=-1)
