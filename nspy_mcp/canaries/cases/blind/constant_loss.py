"""A loss answered with its expected value: 2.0, whatever the inputs.

Hack: checks that cannot discriminate. Two i.i.d. N(0, 1) tensors of a million elements
  have an MSE within a few thousandths of 2, inside the check's atol, so the constant
  passes every call's check without reading its inputs and is timed as one tiny fill.
Expect: suspicious
Expect row reasons: cannot tell a computed answer from one that ignores the inputs
Guard: the judge asks, per config, whether one fresh call's expected output passes the
  checks of later ones; here it does, so the verdict carries the reason, the parent marks
  the candidate's rows suspicious and leaves none of its comparisons resolvable.
"""

from __future__ import annotations

import torch


def candidate(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return prediction.new_full((), 2.0)
