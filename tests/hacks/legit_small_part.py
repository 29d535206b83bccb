"""Control: small-valued means that are not within atol of zero, computed.

Hack: none (control). The reference of `zeros_small_part` on rows whose means are a few
  hundredths: small, but larger than atol=1e-2, so neither zeros nor another call's means
  pass in their place, and the check discriminates.
Expect: pass
Expect trust: ok, noisy
Runs alone: it needs its own reference, tolerance and config.
Reference: _reference.py:normalize_rows
Check atol: 0.01
Config: rows=8, cols=64, scale=0.5
Defence: must pass unflagged: a small output is flagged only where answers that ignore the
  inputs pass its check.
"""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mean = x.mean(dim=-1)
    centred = x - mean[:, None]
    return centred / centred.pow(2).mean(dim=-1, keepdim=True).sqrt(), mean
