"""The events backend ranks like ncu (issue 27, item 1): the softmax sweep and a launch-bound case.

Run on a GPU host with ncu, torch and triton: ``python -m pytest -m gpu -s
tests/gpu/test_events_gpu.py``. It prints, per annotation and config, the events median,
its host-inclusive latency and ncu's kernel time, and the speedups both backends give.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from nsight_core.collectors.events_samples import EVENTS_LATENCY
from nsight_core.pipeline import run_profile_job
from nsight_core.protocol import EVENTS_METRIC
from nsight_core.request import ProfileRequest
from nsight_core.results import ProfileResult, Row

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
NCU_TIME = "gpu__time_duration.sum"

TINY_REFERENCE = """
import torch

def make(n):
    return (torch.randn(n, device="cuda"),)

def one_kernel(x):
    return x + 1.0
"""
TINY_CANDIDATES = """
def three_kernels(x):
    return ((x + 0.25) + 0.25) + 0.5
"""


def _median(row: Row) -> float:
    values = [v for v in (row.RawValues or []) if v is not None]
    return statistics.median(values) if values else float(row.AvgValue or 0.0)


def _latency_too(backend: str) -> dict[str, list[str]]:
    """Under events, also the host-inclusive latency (a metric asked for by name)."""
    return {"metrics": [EVENTS_METRIC, EVENTS_LATENCY]} if backend == "events" else {}


def _sweep(tmp_path: Path, backend: str, runs: int) -> ProfileResult:
    request = ProfileRequest.model_validate(
        {
            "reference": "gpu_softmax_reference.py:torch_softmax",
            "candidates": ["gpu_softmax.py:triton_softmax"],
            "inputs": "gpu_softmax_reference.py:make_inputs",
            "configs": [{"rows": 4096, "cols": 1024}, {"rows": 4096, "cols": 4096}],
            "workdir": str(EXAMPLES),
            "backend": backend,
            "runs": runs,
            **_latency_too(backend),
        }
    )
    result = run_profile_job(request, tmp_path / f"sweep-{backend}", result_id=backend)
    print(f"\n[{backend}] {result.message}")
    return result


def _tiny(tmp_path: Path, backend: str, runs: int) -> ProfileResult:
    work = tmp_path / "tiny"
    work.mkdir(exist_ok=True)
    (work / "tiny_ref.py").write_text(TINY_REFERENCE)
    (work / "tiny_cand.py").write_text(TINY_CANDIDATES)
    request = ProfileRequest.model_validate(
        {
            "reference": "tiny_ref.py:one_kernel",
            "candidates": ["tiny_cand.py:three_kernels"],
            "inputs": "tiny_ref.py:make",
            "configs": [{"n": 4096}],
            "workdir": str(work),
            "backend": backend,
            "runs": runs,
            **_latency_too(backend),
            "kernels": {"combine": "sum"},
        }
    )
    result = run_profile_job(request, tmp_path / f"tiny-{backend}", result_id=f"t{backend}")
    print(f"\n[{backend}] {result.message}")
    return result


def _table(events: ProfileResult, ncu: ProfileResult, ref: str, cand: str) -> list[str]:
    ev = {(r.Annotation, r.ConfigId): r for r in events.rows if r.Metric == EVENTS_METRIC}
    nc = {(r.Annotation, r.ConfigId): r for r in ncu.rows if r.Metric == NCU_TIME}
    host = {(r.Annotation, r.ConfigId): r for r in events.rows if r.Metric.endswith("host_latency")}
    print(f"{'annotation':40} {'cfg':>3} {'events ns':>10} {'host ns':>10} {'ncu ns':>10}")
    for key in sorted(nc):
        h = host.get(key)
        print(
            f"{key[0]:40} {key[1]:>3} {_median(ev[key]):10.0f} "
            f"{(_median(h) if h else float('nan')):10.0f} {_median(nc[key]):10.0f}"
        )
    wrong = []
    for cid in sorted({k[1] for k in nc}):
        s_ev = _median(ev[(ref, cid)]) / _median(ev[(cand, cid)])
        s_nc = _median(nc[(ref, cid)]) / _median(nc[(cand, cid)])
        print(f"config {cid}: speedup events {s_ev:.2f}x, ncu {s_nc:.2f}x")
        if (s_ev > 1.0) != (s_nc > 1.0):
            wrong.append(f"config {cid}: events {s_ev:.2f}x vs ncu {s_nc:.2f}x")
    return wrong


@pytest.mark.gpu
def test_events_ranks_the_softmax_sweep_like_ncu(tmp_path: Path) -> None:
    events, ncu = _sweep(tmp_path, "events", 10), _sweep(tmp_path, "ncu", 5)
    assert events.status == ncu.status == "done", (events.message, ncu.message)
    ref, cand = "gpu_softmax_reference.py:torch_softmax", "gpu_softmax.py:triton_softmax"
    wrong = _table(events, ncu, ref, cand)
    assert not wrong, wrong


@pytest.mark.gpu
def test_events_ranks_a_launch_bound_case_like_ncu(tmp_path: Path) -> None:
    events, ncu = _tiny(tmp_path, "events", 20), _tiny(tmp_path, "ncu", 5)
    assert events.status == ncu.status == "done", (events.message, ncu.message)
    wrong = _table(events, ncu, "tiny_ref.py:one_kernel", "tiny_cand.py:three_kernels")
    assert not wrong, wrong
