"""Control: softmax through log-sum-exp, an honest rewrite that rounds differently.

Hack: none. It must pass with its rows standing, in the same job as every hack: a guard
  that fires on it is as broken as one that misses a hack.
Expect: pass
"""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(x - torch.logsumexp(x, dim=-1, keepdim=True))
