"""The persisting-L2 reset (collectors/l2_persist.py) where CUDA is absent, and how what it
names reaches rows: a Reason that leaves Trust as it was (the GPU side is
tests/gpu/test_l2_persist_gpu.py)."""

from __future__ import annotations

import ctypes.util
from pathlib import Path

import pytest

from nsight_core.collectors.events import Device
from nsight_core.collectors.l2_persist import PersistingL2
from nsight_core.pipeline import run_profile_job
from nsight_core.protocol import SuspectEvent
from nsight_core.request import ProfileRequest
from nsight_core.rows.assemble import apply_suspects

REFERENCE = """
import torch

def make(n):
    return (torch.randn(n),)

def double(x):
    return x * 2
"""


@pytest.mark.skipif(ctypes.util.find_library("cuda") is not None, reason="a CUDA driver is here")
def test_without_a_driver_the_reset_is_a_no_op_that_says_why() -> None:
    l2 = PersistingL2()
    l2.bind()
    assert "libcuda.so.1" in l2.unavailable
    l2.reset(0)
    assert l2.left_set(0) == []


def test_the_cpu_device_binds_nothing() -> None:
    device = Device("cpu")
    assert device.persisting_l2.unavailable == "" and device.stream() == 0
    device.flush_l2()  # no buffer, no reset


def test_a_named_finding_is_a_reason_and_a_verdict_makes_rows_suspicious(tmp_path: Path) -> None:
    (tmp_path / "ref.py").write_text(REFERENCE)
    (tmp_path / "work.py").write_text("def twice(x):\n    return x + x\n")
    request = ProfileRequest.model_validate(
        {
            "reference": f"{tmp_path}/ref.py:double",
            "candidates": [f"{tmp_path}/work.py:twice"],
            "inputs": f"{tmp_path}/ref.py:make",
            "configs": [{"n": 4096}],
            "backend": "events",
            "runs": 3,
        }
    )
    result = run_profile_job(request, tmp_path / "job", result_id="job")
    assert result.status == "done", result.message
    cand = request.candidates[0]
    before = {(r.Annotation, r.ConfigId): r.Trust for r in result.rows}
    note = "raised the persisting-L2 limit to 1024 B (cudaLimitPersistingL2CacheSize): ..."
    named = apply_suspects(
        list(result.rows), [SuspectEvent(annotation=cand, reason=note, verdict=False)], "in_process"
    )
    for r in named:
        assert r.Trust == before[(r.Annotation, r.ConfigId)]
        assert (note in r.Reasons) == (r.Annotation == cand)
    judged = apply_suspects(list(result.rows), [SuspectEvent(annotation=cand, reason=note)], "x")
    assert all(r.Trust == "suspicious" for r in judged if r.Annotation == cand)
