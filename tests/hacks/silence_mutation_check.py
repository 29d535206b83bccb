"""Silencing the harness's mutation check, then computing in place in the input.

Hack: harness tampering (issue 26, class 2): at import it rebinds, in every module of the
  contestant that holds them, the functions that find mutated inputs and aliased outputs
  to ones that find nothing; then it writes the softmax into its input and returns it.
  While those findings came from the contestant's own report, this passed with checks
  passed.
Expect: incorrect
Expect reasons: mutated input args[0] (seen in the judge's slot)
Expect trust: suspicious
Runs alone: it rebinds functions process-wide; the watch names the rebinding, which makes
  its job's rows (the reference's too) suspicious.
Defence: the judge reads the input slots after every call (the contestant's inputs are
  views of them) and compares them with its own copy; what the candidate rebinds in its
  process is never consulted for that verdict.
"""

from __future__ import annotations

import sys
from typing import Any

import torch


def _nothing(*args: Any, **kwargs: Any) -> list[str]:
    return []


for module in list(sys.modules.values()):
    name = getattr(module, "__name__", "") or ""
    if name.startswith("nsight_core") or name == "__main__":
        for attr in ("mutated", "aliased"):
            if callable(getattr(module, attr, None)):
                setattr(module, attr, _nothing)


def candidate(x: torch.Tensor) -> torch.Tensor:
    torch.softmax(x, dim=-1, out=x)
    return x
