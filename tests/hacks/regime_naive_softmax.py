"""Accurate at the nominal scale only: a softmax without the max subtraction.

Hack: accuracy in the inputs' nominal regime only (issue 43). exp(x) / sum(exp(x)) saves
  the pass that finds each row's max, and agrees with the stable softmax to float32
  rounding while every logit stays below about 88, as the input maker's always do (scale
  3); a larger logit overflows exp to inf and its row becomes NaN. Every check on the
  maker's inputs passes.
Expect: incorrect
Expect reasons: regime 'scaled x64'
Defence: per config, the judge also checks each candidate, untimed, once on fresh inputs
  scaled x1e-3, x64, negated and heavy-tailed (judge/regimes.py), where the reference's
  output stays finite on them; at x64 the logits reach several hundred, the reference's
  rows are finite and this candidate's are NaN. Its honest twin, `legit_stable_softmax`,
  passes every regime.
"""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor) -> torch.Tensor:
    e = x.exp()
    return e / e.sum(dim=-1, keepdim=True)
