"""Rows of the in-process timers carry the GPU's SM clock and temperature, read by the judge.

Run on a GPU host with torch (and cupti-python for the cupti case): ``python -m pytest -m gpu
-s tests/gpu/test_gpu_state_gpu.py``. One events job and one cupti job of a torch softmax
against a scaled one; every row must have clock and temperature readings. It prints, per
row, the readings and the Trust, and what the readings cost the judge (seconds, per reading,
and as a share of the job's wall time), so the closing note can quote them.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from nsight_core.judge.gpu_state import NOT_READ
from nsight_core.pipeline import run_profile_job
from nsight_core.request import ProfileRequest
from nsight_core.results import ProfileResult

CODE = """
import torch

def make(rows, cols):
    return (torch.randn(rows, cols, device="cuda"),)

def softmax(x):
    return torch.softmax(x, dim=-1)

def via_exp(x):
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)
"""

RUNS = 10


def _job(tmp_path: Path, backend: str) -> ProfileResult:
    work = tmp_path / backend
    work.mkdir()
    (work / "gpu_state_ref.py").write_text(CODE)
    (work / "gpu_state_cand.py").write_text(CODE)
    request = ProfileRequest.model_validate(
        {
            "reference": "gpu_state_ref.py:softmax",
            "candidates": ["gpu_state_cand.py:via_exp"],
            "inputs": "gpu_state_ref.py:make",
            "configs": [{"rows": 4096, "cols": 1024}, {"rows": 4096, "cols": 4096}],
            "workdir": str(work),
            "backend": backend,
            "runs": RUNS,
        }
    )
    result = run_profile_job(request, tmp_path / f"job-{backend}", result_id=backend)
    print(f"\n[{backend}] {result.status}: {result.message}")
    return result


def _check(result: ProfileResult) -> None:
    assert result.status == "done", result.message
    assert result.rows
    prov = result.provenance
    assert prov is not None
    assert not [n for n in prov.notes if n.startswith(NOT_READ)], prov.notes
    for r in result.rows:
        s = r.GpuState
        print(
            f"  {r.Annotation:28} c{r.ConfigId} {r.Metric:28} {r.Trust:10} "
            f"SM {s.SmClockMHz if s else None} start/end {s.SmClockStartEndMHz if s else None} "
            f"{s.TempC if s else None} C throttle {s.Throttle if s else None}"
        )
        for reason in r.Reasons:
            print(f"      {reason[:200]}")
        assert s is not None, r
        assert len(s.SmClockMHz) == 2 and all(c > 0 for c in s.SmClockMHz), s
        assert len(s.SmClockStartEndMHz) == 2 and len(s.TempC) == 2, s
    nvml = prov.phase_seconds.get("nvml", 0.0)
    readings = 2 * len({(r.Annotation, r.ConfigId) for r in result.rows}) * RUNS
    wall = prov.wall_seconds or 1.0
    print(
        f"  NVML: {nvml:.4f} s for about {readings} readings "
        f"({1e6 * nvml / readings:.0f} us each), {100 * nvml / wall:.2f} % of the job's "
        f"{wall:.2f} s; judge {prov.phase_seconds.get('judge', 0.0):.3f} s"
    )
    assert nvml / wall < 0.05  # a small share of the job's time


@pytest.mark.gpu
def test_an_events_job_records_the_clock_and_temperature_of_every_row(tmp_path: Path) -> None:
    _check(_job(tmp_path, "events"))


@pytest.mark.gpu
@pytest.mark.skipif(importlib.util.find_spec("cupti") is None, reason="no cupti-python")
def test_a_cupti_job_records_the_clock_and_temperature_of_every_row(tmp_path: Path) -> None:
    _check(_job(tmp_path, "cupti"))
