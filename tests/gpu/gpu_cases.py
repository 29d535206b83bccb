"""Candidates for the GPU tests: CUDA tensors, and the ways a candidate can go wrong on a GPU.

Loaded by the worker as 'gpu_cases.py:<name>' (workdir = this directory); never imported by
the tests themselves, which keeps torch and triton out of the test process. Their reference
and input maker live in `gpu_cases_reference.py`.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import torch
import triton
import triton.language as tl


def good(x: Any) -> Any:
    return torch.clamp(x, min=0)


def wrong(x: Any) -> Any:
    return torch.relu(x) + 1e-3


def mutates(x: Any) -> Any:
    return x.clamp_(min=0)


def raises(x: Any) -> Any:
    raise RuntimeError("candidate failed on purpose")


def segfaults(x: Any) -> Any:
    return ctypes.string_at(0)


def exits(x: Any) -> Any:
    os._exit(3)


@triton.jit  # type: ignore[untyped-decorator,unused-ignore]
def _spin(flag_ptr, out_ptr):  # type: ignore[no-untyped-def,unused-ignore]
    # The flag is never set: a volatile load keeps the compiler from hoisting it.
    i = 0
    while tl.load(flag_ptr, volatile=True) == 0:
        i += 1
    tl.store(out_ptr, i)


def spins(x: Any) -> Any:
    flag = torch.zeros(1, dtype=torch.int32, device="cuda")
    out = torch.zeros(1, dtype=torch.int32, device="cuda")
    _spin[(1,)](flag, out)
    torch.cuda.synchronize()
    return torch.relu(x)
