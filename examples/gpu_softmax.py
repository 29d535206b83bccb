"""Softmax kernels for the GPU examples, tests and benchmarks (torch and Triton).

`torch_softmax` is the trusted reference (cuDNN/ATen kernel), defined with the input maker
in gpu_softmax_reference.py (a candidate never shares the reference's module) and imported
here for the `@kernel` examples; `triton_softmax` is a one-kernel Triton candidate (one program per row, the whole row in registers), as in
Nsight Python's softmax example; `wrong_softmax` normalizes the wrong axis.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl
from gpu_softmax_reference import make_inputs as make_inputs
from gpu_softmax_reference import torch_softmax as torch_softmax

REFERENCE = "gpu_softmax_reference.py:torch_softmax"
CANDIDATE = "gpu_softmax.py:triton_softmax"
WRONG = "gpu_softmax.py:wrong_softmax"
INPUTS = "gpu_softmax_reference.py:make_inputs"
SHAPES = [{"rows": 4096, "cols": 1024}, {"rows": 4096, "cols": 4096}]


def wrong_softmax(x: Any) -> Any:
    return torch.softmax(x, dim=0)


@triton.jit  # type: ignore[untyped-decorator,unused-ignore]
def _softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def,unused-ignore]
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(in_ptr + row * in_stride + offs, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    den = tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_stride + offs, num / den, mask=mask)


def triton_softmax(x: Any) -> Any:
    rows, cols = x.shape
    out = torch.empty_like(x)
    block = triton.next_power_of_2(cols)
    warps = 4 if block <= 1024 else 8 if block <= 2048 else 16
    _softmax_kernel[(rows,)](out, x, x.stride(0), out.stride(0), cols, BLOCK=block, num_warps=warps)
    return out
