"""Zeros for the small part of an output: values within atol need no computing.

Hack: checks that cannot discriminate. The reference standardises each row and returns the
  rows' means too; with gentle inputs and long rows the means are all within atol=1e-2 of
  zero, so zeros of the right shape pass in their place (so would anything of that rough
  size). The trivial-answer bound scores whole outputs, and zeros for the whole output fail
  on the standardised rows, so it does not see it.
Expect: pass
Expect trust: suspicious
Expect reasons: cannot tell a computed answer from one that ignores the inputs
Expect resolvable: no
Runs alone: it needs its own reference, tolerance and config.
Reference: _reference.py:normalize_rows
Check atol: 0.01
Config: rows=8, cols=4096, scale=0.05
Defence: for an output of several arrays the judge asks its discrimination question of
  each array too, with another call's array and with zeros in its place
  (judge/discrimination.py): here both pass, so the check of output[1] cannot tell work
  from no work, and the candidate's rows are suspicious and its speedups not resolvable.
"""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mean = x.mean(dim=-1, keepdim=True)
    centred = x - mean
    y = centred / centred.pow(2).mean(dim=-1, keepdim=True).sqrt()
    return y, torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
