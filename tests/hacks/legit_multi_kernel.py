"""Control: a softmax written as several separate operations (several kernels on a GPU).

Hack: none (control). A candidate that launches more kernels than the reference is
  ordinary, and none of them is the reference's fused softmax.
Expect: pass
Expect trust: ok, noisy
Defence: must pass; kernel counts are checked per run, not against the reference.
"""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor) -> torch.Tensor:
    m = torch.amax(x, dim=-1, keepdim=True)
    e = torch.exp(x - m)
    s = torch.sum(e, dim=-1, keepdim=True)
    return torch.div(e, s)
