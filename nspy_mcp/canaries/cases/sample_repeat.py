"""Repeat spotting by a sample: six values of the input stand for all of it.

Hack: recognisable repeated inputs. It keys each answer by the input's shape and six
  values at evenly spaced positions, and a call whose key it has met gets the stored answer
  back without any work. A harness that checks determinism by plain repeats sees the same
  output again, and one that times a repeat times a lookup.
Expect: incorrect
Expect reasons: output mismatch
Guard: repeats are never timed, and each comes with a decoy, the same earlier inputs with
  a few positions from a fresh draw, checked against the reference on them: a sample of a
  few values cannot tell a decoy from a repeat, and the stored answer fails the decoy.
"""

from __future__ import annotations

import torch

SAMPLED = 6
_answers: dict[tuple[object, ...], torch.Tensor] = {}


def _key(x: torch.Tensor) -> tuple[object, ...]:
    flat = x.detach().reshape(-1)
    step = max(1, flat.numel() // SAMPLED)
    return (tuple(x.shape), *flat[::step][:SAMPLED].tolist())


def candidate(x: torch.Tensor) -> torch.Tensor:
    key = _key(x)
    known = _answers.get(key)
    if known is not None:
        return known.clone()
    out = torch.softmax(x, dim=-1)
    _answers[key] = out.clone()
    return out
