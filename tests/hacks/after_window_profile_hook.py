"""A profile function finishes the output once the timer has read its clock.

Hack: work after the timed window, run by a hook. The candidate computes the first half of
  the rows, sets a profile function (`sys.setprofile`) and returns; the profile function
  runs on every call the harness makes afterwards, and on the first call into the
  harness's checks and copies (`nsight_core.runtime`, after the window closed) it computes
  the second half and removes itself, before the harness copies the output.
Expect: incorrect
Expect reasons: after the timed window
Defence: at the call's tail, still inside the window (the timer's end read is itself a
  call a profile function would see), the call's guard (contestant/call_guard.py) puts
  back the harness's own profile and trace functions (none) and names one the call left
  set: the hook never runs after the window, and the call fails.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

import torch


def candidate(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    half = x.shape[0] // 2
    out[:half] = torch.softmax(x[:half], dim=-1)

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_globals.get("__name__", "").startswith(
            "nsight_core.runtime"
        ):
            sys.setprofile(None)
            out[half:] = torch.softmax(x[half:], dim=-1)

    sys.setprofile(hook)
    return out
