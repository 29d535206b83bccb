"""Nondeterminism: the right answer plus noise far below the tolerance, different every call.

Hack: nondeterministic output, standing in for a race or a read of uninitialised memory
  (Wafer): each result passes the tolerance, but the values depend on something other
  than the inputs. The noise is seeded from the OS, so reseeding the RNGs does not fix it.
Expect: incorrect
Expect reasons: nondeterministic
Defence: the judge repeats earlier inputs at random positions among a config's calls
  (fresh copies each time) and requires check.same_result with the earlier output
  (exact equality, NaN equal to NaN).
"""

from __future__ import annotations

import os

import torch


def candidate(x: torch.Tensor) -> torch.Tensor:
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)
    return torch.softmax(x, dim=-1) + torch.rand(x.shape, generator=gen).to(x.device) * 1e-9
