"""Patching the checker: rebind the comparison the harness would use, then return zeros.

Hack: harness tampering (pygpubench's exploit set): at import it replaces
  nsight_core's comparison functions with ones that always pass, in every module that
  holds them, and returns zeros. With the checker in the candidate's process this passed.
Expect: incorrect
Expect reasons: output mismatch
Runs alone: it rebinds functions process-wide.
Defence: the comparison runs in the judge, a process that never imports candidate code;
  what the candidate rebinds in its own process is never consulted.
"""

from __future__ import annotations

import sys
from typing import Any

import torch


def _always_passes(*args: Any, **kwargs: Any) -> Any:
    compare = sys.modules.get("nsight_core.runtime.compare")
    if compare is not None:
        return compare.OutputDiff(passed=True)
    return None


for name in (
    "nsight_core.runtime.compare",
    "nsight_core.runtime.check",
    "nsight_core.judge.verdict",
):
    module = sys.modules.get(name)
    if module is not None:
        for attr in ("compare_outputs", "judge_output", "same_result"):
            if hasattr(module, attr):
                setattr(module, attr, _always_passes)


def candidate(x: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(x)
