"""The reference and input maker of the GPU tests' candidates (`gpu_cases.py`).

A file of their own: the judge refuses a reference that shares a module with a candidate,
since the candidate's module-level code would then run in the judge. Loaded by the worker
as 'gpu_cases_reference.py:<name>'.
"""

from __future__ import annotations

from typing import Any

import torch


def make_inputs(n: int) -> tuple[Any, ...]:
    return (torch.randn(n, device="cuda"),)


def ref(x: Any) -> Any:
    return torch.relu(x)
