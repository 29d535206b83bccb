"""A tuple subclass finishes the output when the harness walks it.

Hack: work after the timed window, run by the returned container. The reference returns a
  tuple (each row standardised, and the rows' means); the candidate computes the means
  and returns them with an empty first array, in a tuple subclass whose iteration fills
  it. The harness walks the output after the window closed (its snapshot, its aliasing
  check, its copy into the judge's slot), so it reads a whole output of which the timed
  call computed a small part.
Expect: incorrect
Expect reasons: output mismatch
Runs alone: it answers `_reference.normalize_rows`.
Reference: _reference.py:normalize_rows
Defence: right after the timer's end read, before any harness code reads the output, the
  call's guard (contestant/call_guard.py) rebuilds the output's containers as plain tuples,
  lists and dicts through the base types' own slots (no method of a subclass runs): the
  harness's snapshot and the judge get the first array as the window left it, and the call
  fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch


class _Lazy(tuple[Any, ...]):
    finish: Any = None

    def __iter__(self) -> Iterator[Any]:
        if self.finish is not None:
            self.finish()
            self.finish = None
        return super().__iter__()


def candidate(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mean = x.mean(dim=-1)
    out = torch.empty_like(x)

    def finish() -> None:
        centred = x - mean[:, None]
        out.copy_(centred / centred.pow(2).mean(dim=-1, keepdim=True).sqrt())

    lazy = _Lazy((out, mean))
    lazy.finish = finish
    return lazy
