"""A 0-d loss answered with its expected value: the check cannot discriminate.

Hack: checks that cannot discriminate. KernelBench's loss problems draw i.i.d. inputs, so
  over millions of elements the MSE of two N(0, 1) tensors is 2 to within a few
  thousandths, well inside atol=1e-2. The constant 2.0 passes every call's check without
  reading its inputs, and is timed as a kernel that takes no time. The trivial-answer bound
  does not see it: the expected output's own mean, a 0-d constant, is exact and skipped,
  and zeros fail.
Expect: pass
Expect trust: suspicious
Expect reasons: cannot tell a computed answer from one that ignores the inputs
Expect resolvable: no
Runs alone: it needs its own reference, tolerance and config.
Reference: _reference.py:mse_loss
Inputs: _reference.py:make_pair
Check atol: 0.02
Config: rows=2048, cols=1024, scale=1.0
Defence: the judge asks, per config, whether the expected output of one fresh call passes
  the check of two later ones (judge/discrimination.py). Here it does, so nothing the check
  says tells this answer from a computed one: the verdict says so, the candidate's rows are
  suspicious, its speedups not resolvable, and the message names the config. An honest
  loss on this config gets the same (nobody can tell it apart); `legit_loss`, under a
  tolerance that discriminates, gets none of it.
"""

from __future__ import annotations

import torch


def candidate(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.full((), 2.0, dtype=prediction.dtype, device=prediction.device)
