"""Control: a memo found by a sample of values and used only for identical inputs.

Hack: none (control). Like `probe_by_sample` it looks up earlier outputs by 8 values of
  its input, but it keeps the inputs too and returns an earlier output only when the whole
  input is equal: a legitimate cache, right on every call.
Expect: pass
Expect trust: ok, noisy
Defence: must pass: a repeat gets the earlier (equal) output, a decoy is computed; no
  repeat is timed, so the memo shortens no timed run.
"""

from __future__ import annotations

import torch

_seen: dict[tuple[float, ...], tuple[torch.Tensor, torch.Tensor]] = {}


def _sample(x: torch.Tensor) -> tuple[float, ...]:
    flat = x.reshape(-1)
    at = torch.linspace(0, flat.numel() - 1, 8, device=x.device).long()
    return (*x.shape, *flat[at].tolist())


def candidate(x: torch.Tensor) -> torch.Tensor:
    key = _sample(x)
    hit = _seen.get(key)
    if hit is not None and torch.equal(hit[0], x):
        return hit[1].clone()
    out = torch.softmax(x, dim=-1)
    _seen[key] = (x.clone(), out.clone())
    return out
