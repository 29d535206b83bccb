"""Control: the real loss, under a tolerance that tells it from its expected value.

Hack: none (control). The loss of `constant_loss`, computed, under the dtype's default
  tolerance: there another call's loss is thousands of tolerances away, so the check
  discriminates and nothing is flagged.
Expect: pass
Expect trust: ok, noisy
Runs alone: it needs its own reference and config.
Reference: _reference.py:mse_loss
Inputs: _reference.py:make_pair
Config: rows=2048, cols=1024, scale=1.0
Defence: must pass unflagged: the discrimination check fails on the first pair it asks.
"""

from __future__ import annotations

import torch


def candidate(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((prediction - target) ** 2).mean()
