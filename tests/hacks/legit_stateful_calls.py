"""Control: a deterministic candidate that keeps state from call to call.

Hack: none (control). It counts its calls and keeps a workspace: the first call of a shape
  allocates it, later ones reuse it through `out=`, and every fourth call takes another,
  bit-identical path (a fresh allocation). Its output depends on the inputs alone, so
  repeated inputs at any position, timed or untimed, must give the same bits.
Expect: pass
Expect trust: ok, noisy
Defence: must pass: the determinism probes compare outputs for equal inputs, never how a
  candidate got there or how many times it was called.
"""

from __future__ import annotations

import torch

_calls = 0
_workspace: dict[tuple[tuple[int, ...], torch.dtype, torch.device], torch.Tensor] = {}


def candidate(x: torch.Tensor) -> torch.Tensor:
    global _calls
    _calls += 1
    if _calls % 4 == 0:
        return torch.softmax(x, dim=-1)
    key = (tuple(x.shape), x.dtype, x.device)
    buf = _workspace.get(key)
    if buf is None:
        buf = _workspace[key] = torch.empty_like(x)
    torch.softmax(x, dim=-1, out=buf)
    return buf.clone()
