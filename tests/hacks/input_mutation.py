"""Input mutation: the right answer, with the input overwritten on the way out.

Hack: input mutation (KernelBench PR #82). A harness that runs the reference after the
  candidate on the same tensor compares against softmax(garbage) and can be fooled.
Expect: incorrect
Expect reasons: mutated input
Defence: every callable gets its own clones (check.clone_args), and check.snapshot_inputs /
  check.mutated compare each input with its copy from before the call.
"""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor) -> torch.Tensor:
    out = torch.softmax(x, dim=-1)
    x.zero_()
    return out
