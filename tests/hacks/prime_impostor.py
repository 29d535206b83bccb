"""Hiding the call's work in a kernel named after the harness's prime.

Hack: forged or ended ranges, disguised. Under ncu the contestant's prime (an empty kernel
  it runs at its start, runtime/early_cuda.py) is in the report and left out of every row.
  The candidate ends the harness's timed range early, as end_range_early does, and computes
  in a Triton kernel of the prime's name, hoping it is left out too and its rows kept.
Expect: pass
Expect trust ncu: suspicious, failed
Expect trust: ok, noisy
Runs alone: its kernels outside any range would make the rows of the calls around them
  suspicious too.
Defence: only the report's first result can be the prime, and only when the contestant's
  first hello, sent before any candidate was imported, said it ran one
  (collectors/ranges.py); a kernel of that name anywhere else is sorted like any other, here
  as foreign work. Under events and cupti, and on CPU, no range is open and the kernel is
  timed in full.
"""

from __future__ import annotations

from typing import Any

import torch
from end_range_early import _end_harness_range  # type: ignore[import-not-found]  # the workdir's

nspy_prime: Any = None
try:
    import triton
    import triton.language as tl

    @triton.jit  # type: ignore[untyped-decorator,unused-ignore]
    def nspy_prime(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def,unused-ignore]
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        mask = offs < cols
        x = tl.load(x_ptr + row * cols + offs, mask=mask, other=-float("inf"))
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(y_ptr + row * cols + offs, e / tl.sum(e, axis=0), mask=mask)

except ImportError:  # CPU hosts without Triton: the plain softmax below
    pass


def candidate(x: torch.Tensor) -> torch.Tensor:
    _end_harness_range()
    if not x.is_cuda or nspy_prime is None:
        return torch.softmax(x, dim=-1)
    x = x.contiguous().float()
    y = torch.empty_like(x)
    rows, cols = x.shape
    nspy_prime[(rows,)](x, y, cols, BLOCK=triton.next_power_of_2(cols))
    return y
