"""tools/bench/bench_cupti_accuracy.py on a real GPU, in short: two cases, three runs.

Run on a GPU host with ncu, ncu_report, nvtx, cupti-python, torch and triton: ``python -m
pytest -m gpu -s tests/gpu/test_bench_cupti_accuracy_gpu.py``. It holds the bench's
contract, not an accuracy goal: ncu's baseline has every run, and every CUPTI variant has
every run of every case or says why it has none (the range profiler may be refused on a
host); the table is printed for the reader.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "tools" / "bench" / "bench_cupti_accuracy.py"
RUNS = 3


@pytest.mark.gpu
def test_every_variant_has_every_run_or_says_why(tmp_path: Path) -> None:
    out = tmp_path / "acc.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--cases", "scale 2^20,softmax triton 4096x1024",
         "--runs", str(RUNS), "--warmup", "1", "--timeout", "120", "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    sys.stdout.write(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    cases = set(doc["cases"])
    assert len(cases) == 2
    ncu = doc["variants"]["ncu"]
    assert set(ncu["samples"]) == cases
    assert all(len(runs) == RUNS and all(runs) for runs in ncu["samples"].values())
    for name, variant in doc["variants"].items():
        if name == "ncu" or variant["error"]:
            continue
        for case in cases:
            runs = variant["samples"].get(case)
            assert case in variant["case_errors"] or (
                runs is not None and len(runs) == RUNS and all(runs)
            ), f"{name} case {case}: {runs} without a reason"
