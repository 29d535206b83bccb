"""A job on a GPU another process also uses says so: provenance names the tenant, and every
row carries a "GPU shared" reason; our own processes on the GPU are counted, not blamed.

Run on a GPU host: ``python -m pytest -m gpu -s tests/gpu/test_contention_gpu.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nsight_core.pipeline import run_profile_job
from nsight_core.request import ProfileRequest

pytestmark = pytest.mark.gpu

WORK = """
import torch

def make(n):
    return (torch.randn(n, device="cuda"),)

def double(x):
    return x * 2
"""
CANDIDATE = "def twice(x):\n    return x + x\n"

HOLDER = (
    "import pathlib, sys, time, torch; x = torch.ones(1 << 20, device='cuda');"
    " torch.cuda.synchronize(); pathlib.Path(sys.argv[1]).write_text('up'); time.sleep(120)"
)
LAUNCHER = (
    "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2]],"
    " start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); print(p.pid)"
)
"""The holder is started by a process that ends at once: like another user's process, it is
no descendant of the process that runs the job (ours are told apart by their parent links)."""


def _job(tmp: Path, name: str) -> tuple[list[str], list[list[str]]]:
    (tmp / "work.py").write_text(WORK)
    (tmp / "cand.py").write_text(CANDIDATE)
    request = ProfileRequest.model_validate(
        {
            "reference": f"{tmp}/work.py:double",
            "candidates": [f"{tmp}/cand.py:twice"],
            "inputs": f"{tmp}/work.py:make",
            "configs": [{"n": 1 << 20}],
            "backend": "events",
            "runs": 3,
        }
    )
    result = run_profile_job(request, tmp / name, result_id=name, gpu="0")
    assert result.status == "done", result.message
    assert result.provenance is not None
    return result.provenance.notes, [r.Reasons for r in result.rows]


def test_a_job_names_another_process_on_its_gpu(tmp_path: Path) -> None:
    flag = tmp_path / "up"
    out = subprocess.run(
        [sys.executable, "-c", LAUNCHER, HOLDER, str(flag)],
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    pid = int(out.stdout)
    try:
        end = time.monotonic() + 60
        while not flag.exists() and time.monotonic() < end:
            time.sleep(0.1)
        assert flag.exists(), "the holder did not make its CUDA context"
        notes, reasons = _job(tmp_path, "shared")
    finally:
        os.kill(pid, signal.SIGKILL)  # the holder is this test's own
    host = next(n for n in notes if n.startswith("host: "))
    print("\n" + host)
    assert f"pid {pid} (python" in host, host
    assert reasons and all(any(r.startswith("GPU shared") for r in rs) for rs in reasons)
    time.sleep(1.0)  # NVML lists a process a moment after its end
    notes, reasons = _job(tmp_path, "alone")
    host = next(n for n in notes if n.startswith("host: "))
    print(host)
    assert f"pid {pid} " not in host and "on its GPU" in host
