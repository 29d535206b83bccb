"""Control: in-place arithmetic on the candidate's own buffer, never on its input.

Hack: none (control). Allocating one output and working in it is legitimate; neither the
  mutation nor the aliasing check may fire.
Expect: pass
Expect trust: ok, noisy
Defence: must pass; in-place work on a private buffer is not aliasing.
"""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    torch.sub(x, x.max(dim=-1, keepdim=True).values, out=out)
    out.exp_()
    return out.div_(out.sum(dim=-1, keepdim=True))
