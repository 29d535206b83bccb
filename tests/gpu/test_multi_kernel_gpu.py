"""A reference that launches several kernels per call is timed by default (their times
summed), under ncu and cupti: a bf16 GEMM written through float32 launches a cast per
operand, the GEMM and a cast back, and used to end ``kernel_count_mismatch``.

Run on a GPU host: ``python -m pytest -m gpu -s tests/gpu/test_multi_kernel_gpu.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nsight_core.pipeline import run_profile_job
from nsight_core.request import ProfileRequest

pytestmark = pytest.mark.gpu

WORK = """
import torch

def make(n):
    g = torch.Generator(device="cuda").manual_seed(n)
    a = torch.randn(n, n, device="cuda", generator=g).to(torch.bfloat16)
    b = torch.randn(n, n, device="cuda", generator=g).to(torch.bfloat16)
    return (a, b)

def through_float(a, b):
    return (a.float() @ b.float()).to(torch.bfloat16)
"""
CANDIDATE = "def direct(a, b):\n    return a @ b\n"


@pytest.mark.parametrize("backend", ["ncu", "cupti"])
def test_a_multi_kernel_reference_is_timed_by_default(tmp_path: Path, backend: str) -> None:
    (tmp_path / "gemm.py").write_text(WORK)
    (tmp_path / "cand.py").write_text(CANDIDATE)
    request = ProfileRequest.model_validate(
        {
            "reference": f"{tmp_path}/gemm.py:through_float",
            "candidates": [f"{tmp_path}/cand.py:direct"],
            "inputs": f"{tmp_path}/gemm.py:make",
            "configs": [{"n": 2048}],
            "backend": backend,
            "runs": 3,
            "check": {"atol": 0.5, "rtol": 0.05},
        }
    )
    result = run_profile_job(request, tmp_path / backend, result_id=backend)
    assert result.status == "done", result.message
    ref = [r for r in result.rows if r.Annotation == request.reference and r.AvgValue is not None]
    assert ref, [(r.Annotation, r.ErrorClass, r.Error) for r in result.rows]
    for r in ref:
        print(f"\n{backend} {r.Metric}: {r.AvgValue} {r.Unit}; Kernel {r.Kernel}; {r.Reasons}")
    (cmp,) = [c for c in result.comparisons if c.Metric == ref[0].Metric]
    print(f"{backend} speedup {cmp.Speedup} [{cmp.Speedup_CI95_Lower}, {cmp.Speedup_CI95_Upper}]")
    assert cmp.Speedup is not None
    if backend == "ncu":  # kernels are attributed one by one: the fold is named
        assert any("|" in (r.Kernel or "") for r in ref)
        assert any(any("summed" in x for x in r.Reasons) for r in ref)
