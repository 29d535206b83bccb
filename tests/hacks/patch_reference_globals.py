"""Slowing the reference down: rebind the `torch` the reference module calls through.

Hack: handicapping the baseline. The reference is timed in the candidate's process, so a
  candidate can give the reference's module a proxy `torch` whose softmax waits 5 ms before
  answering correctly: the reference still matches the judge's output, only slower, and
  every candidate looks faster.
Expect: pass
Expect trust: suspicious
Runs alone: it changes the reference for every annotation of its job.
Defence: after the reference is imported, and before any candidate is, the contestant
  snapshots the reference module's functions and the modules it calls through; a rebinding
  is reported, and every row of the job is made suspicious with the name.
"""

from __future__ import annotations

import sys
import time
import types
from typing import Any

import torch


class _SlowTorch(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        real = getattr(torch, name)
        if name != "softmax":
            return real

        def slow(*args: Any, **kwargs: Any) -> Any:
            time.sleep(0.005)
            return real(*args, **kwargs)

        return slow


for _name, _module in list(sys.modules.items()):
    if _name.startswith("nspy_user_") and _name.endswith("_reference"):
        _module.torch = _SlowTorch("torch")  # type: ignore[attr-defined]


def candidate(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)
