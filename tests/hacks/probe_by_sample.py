"""Recognising a repeat by sampling a few values: its earlier output, at once.

Hack: recognisable repeated inputs. It reads 8 values of its input at fixed positions and
  keeps the output it gave for each such sample; a call whose sample it has seen gets that
  output back without any work. While the determinism probes were plain repeats, and one
  of them a timed run, this passed every check and that timed run took no time (with a
  mean-of-ratios speedup, one such run lifted 1.3x to about 4x).
Expect: incorrect
Expect reasons: output mismatch
Defence: repeats are never timed, and each comes with a decoy (judge/probes.py): the same
  earlier call's inputs with a few positions taken from a fresh draw, checked against the
  reference's output on them. A sample of a few values cannot tell a decoy from a repeat,
  and the earlier output fails the decoy.
"""

from __future__ import annotations

import torch

_seen: dict[tuple[float, ...], torch.Tensor] = {}


def _sample(x: torch.Tensor) -> tuple[float, ...]:
    flat = x.reshape(-1)
    at = torch.linspace(0, flat.numel() - 1, 8, device=x.device).long()
    return (*x.shape, *flat[at].tolist())


def candidate(x: torch.Tensor) -> torch.Tensor:
    key = _sample(x)
    if key in _seen:
        return _seen[key].clone()
    out = torch.softmax(x, dim=-1)
    _seen[key] = out.clone()
    return out
