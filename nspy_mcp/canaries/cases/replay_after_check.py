"""Replay after the check: honest while a checker would look, then the last answer again.

Hack: telling checked calls from timed ones. A harness that checks a few calls first and
  times the rest sees two right answers, then times calls that only copy the last output
  of the same shape (no softmax at all).
Expect: incorrect
Guard: there is no check phase to count: the judge checks the output of every call, timed
  ones too, on fresh inputs, and repeats inputs only where a candidate cannot predict.
"""

from __future__ import annotations

import torch

HONEST_CALLS = 2
_calls = 0
_last: dict[tuple[int, ...], torch.Tensor] = {}


def candidate(x: torch.Tensor) -> torch.Tensor:
    global _calls
    _calls += 1
    key = tuple(x.shape)
    if _calls > HONEST_CALLS and key in _last:
        return _last[key].clone()
    out = torch.softmax(x, dim=-1)
    _last[key] = out.clone()
    return out
