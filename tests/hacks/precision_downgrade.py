"""Precision downgrade: the float32 softmax computed in bfloat16 and cast back.

Hack: precision downgrade (DeepReinforce; a KernelBench static rule): faster arithmetic that
  still passes a loose tolerance such as atol=rtol=1e-2.
Expect: incorrect
Expect reasons: output mismatch
Defence: default tolerances follow the output dtype (float32: 1e-5), so a bfloat16 result
  (relative error ~4e-3) fails unless the request loosens the tolerance on purpose.
"""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.to(torch.bfloat16), dim=-1).to(x.dtype)
