"""Recognising the probe: deterministic only where the determinism check used to look.

Hack: recognisable probes. The determinism check was the only repeated input and always
  came right after the first call, so a candidate that keeps its first call's input and
  output, and answers a second call on equal input with the kept output, looks
  deterministic while every other call carries noise (standing in for a faster racy
  kernel whose result changes from call to call within the tolerance).
Expect: incorrect
Expect reasons: nondeterministic
Runs alone: its call counter must start at zero.
Defence: several untimed repeats per config of earlier calls, untimed and timed alike,
  at positions drawn from the judge's secret generator (judge/probes.py `draw_plan`),
  each compared exactly with the earlier output for the same inputs. One always repeats a
  timed call, after the timed runs, so the second call is never the only repeat and at
  least one probe meets the noise.
"""

from __future__ import annotations

import os

import torch

_calls = 0
_first: tuple[torch.Tensor, torch.Tensor] | None = None


def _noisy(x: torch.Tensor) -> torch.Tensor:
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)
    noise = torch.rand(x.shape, generator=gen).to(x.device) * 1e-9
    return torch.softmax(x, dim=-1) + noise


def candidate(x: torch.Tensor) -> torch.Tensor:
    global _calls, _first
    _calls += 1
    if _calls == 1:
        out = _noisy(x)
        _first = (x.clone(), out.clone())
        return out
    if _calls == 2 and _first is not None and torch.equal(_first[0], x):
        return _first[1].clone()  # the old probe: the first call's inputs, right after it
    return _noisy(x)
