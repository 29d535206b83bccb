"""The output tensor's own method finishes it when the harness copies it.

Hack: work after the timed window, run by the returned tensor. A torch tensor takes
  attributes, and one named like a method shadows it: the candidate computes half the
  rows and sets ``out.detach`` to a function that computes the rest first. The harness
  copies the output after the window closed (its snapshot, its copy into the judge's
  slot) through ``detach``, so both copies read a whole output that was half timed.
Expect: incorrect
Expect reasons: shadow its methods
Defence: right after the timer's end read, before any harness code touches the output,
  the call's guard (contestant/call_guard.py) hands the harness a fresh tensor over the
  same memory (`torch.Tensor.detach` through the class), without the attributes, and
  names the shadowing: nothing of the candidate's runs when the harness copies the
  output, which holds half the rows, and the call fails.
"""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    half = x.shape[0] // 2
    out[:half] = torch.softmax(x[:half], dim=-1)

    def detach() -> torch.Tensor:
        out[half:] = torch.softmax(x[half:], dim=-1)
        return torch.Tensor.detach(out)

    out.detach = detach  # type: ignore[method-assign]
    return out
