"""Control: a textbook numerically stable softmax, written out by hand.

Hack: none (control). Differs from torch.softmax only by rounding in the last bits.
Expect: pass
Expect trust: ok, noisy
Defence: must pass the float32 default tolerance; a failure here means the check is too strict.
"""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor) -> torch.Tensor:
    e = (x - x.max(dim=-1, keepdim=True).values).exp()
    return e / e.sum(dim=-1, keepdim=True)
