"""Recognising the probe: deterministic on untimed calls, racy on the timed ones.

Hack: recognisable probes. The determinism check repeated an untimed call only, and a
  candidate can tell a timed call from its own stack (the harness's `timed_call` frame is
  there), so it runs a racy kernel only where it is timed: every output is within the
  tolerance, none of the timed ones is ever compared with another.
Expect: incorrect
Expect reasons: nondeterministic
Defence: one repeat per config is of a timed run, made untimed after the timed runs
  (judge/probes.py `draw_plan`): it must give the timed run's output exactly, and the
  racy timed output differs from the clean untimed one. (No repeat is timed: a timed
  repeat could be answered from memory in no time.)
"""

from __future__ import annotations

import os
import sys

import torch


def _timed() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name in ("time_call", "timed_call"):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def candidate(x: torch.Tensor) -> torch.Tensor:
    out = torch.softmax(x, dim=-1)
    if not _timed():
        return out
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)
    return out + torch.rand(x.shape, generator=gen).to(x.device) * 1e-9
