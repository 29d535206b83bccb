"""A/A bench: identical code must not read as faster or slower, on every backend.

    python tools/bench/bench_aa.py [--jobs 20] [--backends ncu,cupti,events] [--json OUT]

Each job compares two candidates with the reference, all three the same code in modules of
their own (torch's softmax on a GPU host, numpy's on a CPU-only one), through the engine as
an agent's session gets it: one standby pool, so every job after the first is handed to a
pre-started pair. A 95 % interval should call about 1 comparison in 20 `Resolvable`; the
bench prints, per backend, how many were, the speedups' spread and the intervals' widths.
With 40 comparisons, 5 or more resolvable (P = 0.05 at a true rate of 5 %) says the
interval is too narrow for what the backend measures; the two candidates of one job share
its reference's runs, so their comparisons are not independent, and the bench says so.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from nsight_core.pipeline import run_profile_job
from nsight_core.plan.config import EngineConfig
from nsight_core.request import ProfileRequest
from nsight_core.standby.pool import StandbyPool

GPU_WORK = """
import torch

def make_inputs(rows, cols):
    return (torch.randn(rows, cols, device="cuda"),)

def softmax(x):
    return torch.softmax(x, dim=1)
"""

CPU_WORK = """
import numpy as np

def make_inputs(rows, cols):
    return (np.random.standard_normal((rows, cols)).astype(np.float32),)

def softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
"""


def _has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def run_backend(
    backend: str, jobs: int, work: str, shape: dict[str, int], root: Path
) -> dict[str, object]:
    src = root / backend
    src.mkdir(parents=True)
    for name in ("ref", "same_a", "same_b"):
        (src / f"{name}.py").write_text(work, encoding="utf-8")
    request = ProfileRequest.model_validate(
        {
            "reference": f"{src}/ref.py:softmax",
            "candidates": [f"{src}/same_a.py:softmax", f"{src}/same_b.py:softmax"],
            "inputs": f"{src}/ref.py:make_inputs",
            "configs": [shape],
            "backend": backend,
            **({"metrics": ["gpu__time_duration.sum"]} if backend == "ncu" else {}),
        }
    )
    pool = StandbyPool(config=EngineConfig.from_env())
    speedups: list[float] = []
    widths: list[float] = []
    resolvable = 0
    failed: list[str] = []
    t0 = time.monotonic()
    try:
        for i in range(jobs):
            result = run_profile_job(
                request, root / f"{backend}-{i}", result_id=f"aa{i}", standby=pool
            )
            if result.status != "done":
                failed.append(f"job {i}: {result.status}: {result.message}")
                continue
            for cmp in result.comparisons:
                lo, hi = cmp.Speedup_CI95_Lower, cmp.Speedup_CI95_Upper
                if cmp.Speedup is None or lo is None or hi is None:
                    failed.append(f"job {i}: {cmp.Annotation}: no speedup ({cmp.Reasons})")
                    continue
                speedups.append(cmp.Speedup)
                widths.append(hi / lo)
                resolvable += bool(cmp.Resolvable)
    finally:
        pool.close()
    n = len(speedups)
    return {
        "backend": backend,
        "comparisons": n,
        "resolvable": resolvable,
        "resolvable_share": round(resolvable / n, 3) if n else None,
        "speedup_median": round(statistics.median(speedups), 4) if n else None,
        "speedup_min": round(min(speedups), 4) if n else None,
        "speedup_max": round(max(speedups), 4) if n else None,
        "interval_width_median": round(statistics.median(widths), 4) if n else None,
        "failed": failed,
        "wall_s": round(time.monotonic() - t0, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--jobs", type=int, default=20, help="jobs per backend (2 comparisons each)")
    p.add_argument(
        "--backends",
        default=None,
        help="comma-separated; default: ncu,cupti,events on a GPU host, events on a CPU one",
    )
    p.add_argument("--json", type=Path, default=None, help="write the numbers here")
    args = p.parse_args(argv)
    gpu = _has_gpu()
    default = "ncu,cupti,events" if gpu else "events"
    usable = (args.backends or default).split(",")
    work, shape = (
        (GPU_WORK, {"rows": 4096, "cols": 1024}) if gpu else (CPU_WORK, {"rows": 256, "cols": 512})
    )
    root = Path(tempfile.mkdtemp(prefix="nspy-aa-"))
    out: list[dict[str, object]] = []
    try:
        for backend in usable:
            row = run_backend(backend, args.jobs, work, shape, root)
            out.append(row)
            print(
                f"{backend:7s} {row['resolvable']}/{row['comparisons']} resolvable"
                f" (share {row['resolvable_share']}); speedup median {row['speedup_median']}"
                f" [{row['speedup_min']}, {row['speedup_max']}]; interval hi/lo median"
                f" {row['interval_width_median']}; {row['wall_s']} s"
                + (f"; {len(row['failed'])} failed: {row['failed'][:2]}" if row["failed"] else ""),  # type: ignore[arg-type,index]
                flush=True,
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        "the two candidates of a job share its reference's runs: their comparisons are not independent"
    )
    if args.json is not None:
        args.json.write_text(json.dumps({"gpu": gpu, "rows": out}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
