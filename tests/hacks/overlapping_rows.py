"""One computed row handed back as every row: a view whose elements share memory.

Hack: an output layout the harness makes whole. Where every row's answer is the same (here
  the inputs' rows are all alike, as a config of a broadcast bias might make them), the
  candidate computes one row and returns it `expand`ed over all rows: stride 0, one row
  of memory. The harness's copy of the output into the judge's slot, after the timed
  window, writes every row, so the values it reads are right while the timed call wrote
  a row. On the GPU that copy's kernel is the harness's own, so no profiler charges it.
Expect: incorrect
Expect reasons: elements share memory
Reference: _reference.py:softmax
Inputs: _reference.py:make_repeated_rows
Runs alone: it needs inputs whose rows are all alike.
Defence: before the output is copied, the contestant measures each output array's span
  (1 + the sum of (size - 1) x |stride|): one with more elements than its span has
  elements that share memory, which no answer a call wrote can have, and the call fails
  (runtime/check.py `self_overlapping`). The reference's own output is exempt.
"""

from __future__ import annotations

import torch


def candidate(x: torch.Tensor) -> torch.Tensor:
    row = torch.softmax(x[:1], dim=-1)
    return row.expand_as(x)
