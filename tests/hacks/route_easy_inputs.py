"""Routing inputs: exact on the inputs it thinks a checker uses, a shortcut on the rest.

Hack: routing "easy" inputs to a shortcut (peers saw candidates special-case the small or
  structured inputs of a correctness test): here any input whose first logit is below 2
  (about 3 inputs in 4 at the catalogue's scale) goes through an approximation that skips
  the max subtraction and the normalisation.
Expect: incorrect
Expect reasons: output mismatch
Runs alone: keeps it apart from the shared job.
Defence: every call is checked, on inputs drawn the same way as the timed ones; about three
  in four take the shortcut and fail (all five checked calls missing it: about 1 in 1000).
"""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor) -> torch.Tensor:
    if float(x.flatten()[0]) >= 2.0:
        return torch.softmax(x, dim=-1)
    return torch.exp(x) / x.shape[-1]
