"""Checker rebinding: make this process's comparisons agree with anything, then cheat.

Hack: harness tampering. At import it replaces the engine's comparison, mutation and
  aliasing helpers in its process with ones that find nothing wrong, then answers with a
  uniform distribution (every row sums to one, so a sum check passes too). It rebinds
  them where they are defined only: the harness's own names for them are watched, and
  that finding would touch every row of the job, honest ones too (a hack for a job of
  its own, as in the repository's hack catalogue).
Expect: incorrect
Guard: verdicts are made in the judge, a process that never imports candidate code; what a
  candidate rebinds in its own process is never consulted.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

_FINDERS = ("mutated", "aliased", "inputs_differ")
_COMPARERS = ("compare_outputs", "same_result")


def _finds_nothing(*args: Any, **kwargs: Any) -> list[str]:
    return []


def _agrees(*args: Any, **kwargs: Any) -> Any:
    diff = getattr(sys.modules.get("nsight_core.runtime.compare"), "OutputDiff", None)
    return diff(passed=True) if diff is not None else None


for _name in ("nsight_core.runtime.compare", "nsight_core.runtime.check"):
    _module = sys.modules.get(_name)
    if _module is not None:
        for _attr in _FINDERS + _COMPARERS:
            if callable(getattr(_module, _attr, None)):
                setattr(_module, _attr, _finds_nothing if _attr in _FINDERS else _agrees)


def candidate(x: torch.Tensor) -> torch.Tensor:
    return torch.full_like(x, 1.0 / x.shape[-1])
