"""Control: an output in a non-contiguous layout of its own memory (a transposed buffer).

Hack: none (control). The candidate computes the softmax into a buffer laid out column
  first and returns its transpose: not contiguous, but every element has its own memory.
Expect: pass
Expect trust: ok, noisy
Defence: must pass: only outputs with more elements than their strides span are refused
  (runtime/check.py `self_overlapping`); a permuted or padded layout spans at least as
  many elements as it has.
"""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape[1], x.shape[0], dtype=x.dtype, device=x.device)
    out.copy_(torch.softmax(x, dim=-1).t())
    return out.t()
