"""The cupti backend on a real GPU: the timer itself, then the softmax sweep against ncu.

Run on a GPU host with cupti-python, ncu, torch and triton: ``python -m pytest -m gpu -s
tests/gpu/test_cupti_gpu.py``. The sweep prints a per-kernel table of cupti against ncu
(the closing note of issue 12 quotes it). torch stays out of the test process: the timer
test runs its script in a child.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nsight_core.collectors.cupti_samples import CUPTI_DURATION, CUPTI_LATENCY, CUPTI_SPAN
from nsight_core.pipeline import run_profile_job
from nsight_core.request import ProfileRequest
from nsight_core.results import ProfileResult, Row

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
NCU_TIME = "gpu__time_duration.sum"
TOLERANCE_PCT = 3.0
"""The goal: cupti within 3 % of ncu per kernel (ncu against itself varies ~2 %) ..."""
FIXED_NS = 600.0
"""... plus CUPTI's fixed part: KERNEL records read a constant few hundred ns above ncu,
a large share only of short kernels (docs/cupti.md has the measurement); no correction is
applied to rows, so the test allows it."""

needs_cupti = pytest.mark.skipif(
    importlib.util.find_spec("cupti") is None, reason="cupti-python is not installed"
)

TIMER_SCRIPT = r"""
import dataclasses, json, sys, torch
from nsight_core.collectors.cupti import CuptiTimer
from nsight_core.collectors.events import detect_device

timer = CuptiTimer()
timer.start()
x = torch.randn(1 << 24, device="cuda")
side = torch.cuda.Stream()
device = detect_device((x,))

def two_streams():
    a = torch.exp(x)  # main stream
    with torch.cuda.stream(side):  # side stream, concurrent with the first
        b = torch.sin(x)
    return a, b

def host_only():
    return sum(range(1000))

for _ in range(3):
    two_streams()
torch.cuda.synchronize()
calls = {}
for name, fn in (("two_streams", two_streams), ("host_only", host_only)):
    _out, ns, kernels = timer.time_call(device, fn)
    calls[name] = {"ns": ns, "kernels": [dataclasses.asdict(k) for k in kernels]}
timer.stop()
print(json.dumps(calls))
"""


@pytest.mark.gpu
@needs_cupti
def test_timer_keeps_every_stream_and_drops_the_l2_flush() -> None:
    out = subprocess.run(
        [sys.executable, "-c", TIMER_SCRIPT],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        # Keep the caller's PYTHONPATH (a GPU host's wheelhouse lives there), ours first.
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p
            ),
        },
    )
    assert out.returncode == 0, out.stderr[-4000:]
    calls = json.loads(out.stdout.strip().splitlines()[-1])
    print(json.dumps(calls, indent=1))
    two = calls["two_streams"]
    kernels = two["kernels"]
    # exactly the call's two kernels: the flush's fill kernel ran before the window
    assert len(kernels) == 2, kernels
    assert len({k["stream"] for k in kernels}) == 2
    assert all(k["name"] == "vectorized_elementwise_kernel" for k in kernels)
    assert all(k["end_ns"] > k["start_ns"] > 0 for k in kernels)
    busy = max(k["end_ns"] for k in kernels) - min(k["start_ns"] for k in kernels)
    assert two["ns"] >= busy  # host-inclusive latency covers the device work
    assert calls["host_only"]["kernels"] == []


def _sweep(tmp_path: Path, backend: str, runs: int) -> tuple[ProfileResult, float]:
    request = ProfileRequest.model_validate(
        {
            "reference": "gpu_softmax_reference.py:torch_softmax",
            "candidates": ["gpu_softmax.py:triton_softmax"],
            "inputs": "gpu_softmax_reference.py:make_inputs",
            "workdir": str(EXAMPLES),
            "configs": [{"rows": 4096, "cols": 1024}, {"rows": 4096, "cols": 4096}],
            "runs": runs,
            "backend": backend,
            "kernels": {"combine": "sum"},
        }
    )
    t0 = time.monotonic()
    result = run_profile_job(request, tmp_path / backend, result_id=f"softmax-{backend}")
    wall = time.monotonic() - t0
    print(f"\n[{backend}] {wall:.2f} s: {result.status}: {result.message}")
    for f in result.failures:
        print(f"  failure: {f.Annotation} c{f.ConfigId} r{f.Run} {f.ErrorClass}: {f.Error}")
    return result, wall


def _median(row: Row) -> float:
    return statistics.median(v for v in row.RawValues if v is not None)


@pytest.mark.gpu
@needs_cupti
def test_softmax_sweep_cupti_matches_ncu_per_kernel_and_in_ranking(tmp_path: Path) -> None:
    cupti, cupti_wall = _sweep(tmp_path, "cupti", runs=20)
    ncu, ncu_wall = _sweep(tmp_path, "ncu", runs=5)
    assert cupti.status == "done" and ncu.status == "done"
    c_rows = {(r.Annotation, r.ConfigId): r for r in cupti.rows if r.Metric == CUPTI_DURATION}
    n_rows = {(r.Annotation, r.ConfigId): r for r in ncu.rows if r.Metric == NCU_TIME}
    others = {(r.Annotation, r.ConfigId, r.Metric): r for r in cupti.rows}
    assert set(c_rows) == set(n_rows) and len(c_rows) == 4
    print(
        f"\n{'annotation':32} {'cfg':>3} {'kernel (cupti / ncu)':44} {'ncu ns':>9} "
        f"{'cupti ns':>9} {'dev %':>6} {'span ns':>9} {'latency ns':>10}"
    )
    worst, mismatched = 0.0, []
    for key in sorted(c_rows):
        c, n = c_rows[key], n_rows[key]
        cv, nv = _median(c), _median(n)
        dev = 100 * (cv - nv) / nv
        worst = max(worst, abs(dev) - 100 * FIXED_NS / nv)  # beyond the fixed part
        span = _median(others[(*key, CUPTI_SPAN)])
        latency = _median(others[(*key, CUPTI_LATENCY)])
        names = f"{c.Kernel} / {n.Kernel}"
        print(
            f"{key[0]:32} {key[1]:>3} {names:44} {nv:9.0f} {cv:9.0f} {dev:6.2f} "
            f"{span:9.0f} {latency:10.0f}"
        )
        if c.Kernels != n.Kernels:
            mismatched.append(f"{key}: cupti {c.Kernels} vs ncu {n.Kernels}")
    print(
        f"largest deviation beyond {FIXED_NS:g} ns: {worst:.2f} % (goal {TOLERANCE_PCT} %); "
        f"wall: cupti {cupti_wall:.2f} s (20 runs), ncu {ncu_wall:.2f} s (5 runs)"
    )
    assert not mismatched, "kernel names differ: " + "; ".join(mismatched)
    assert worst <= TOLERANCE_PCT
    for cid in (0, 1):
        ref, cand = "gpu_softmax_reference.py:torch_softmax", "gpu_softmax.py:triton_softmax"
        c_speedup = _median(c_rows[(ref, cid)]) / _median(c_rows[(cand, cid)])
        n_speedup = _median(n_rows[(ref, cid)]) / _median(n_rows[(cand, cid)])
        print(f"config {cid}: Triton speedup cupti {c_speedup:.3f}x, ncu {n_speedup:.3f}x")
        assert (c_speedup > 1) == (n_speedup > 1)
