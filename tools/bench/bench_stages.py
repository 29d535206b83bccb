"""Staged evaluation against profiling every candidate under ncu, in one command (issue 12).

Run on a GPU host with ncu, torch and (for the cupti screen) cupti-python:

    python tools/bench/bench_stages.py [--candidates 32] [--runs 3] [--json OUT.json]

Workload: `--candidates` torch softmax candidates (default 32, the request's maximum), each
`torch.softmax` after 0-5 extra elementwise passes over its input (so they differ in speed,
and several tie), against torch.softmax as the reference, on 4096x1024 fp32, with the ten
metrics of issue 12 (several replay passes per kernel).

1. all: one `run_profile_job` with backend ncu over every candidate;
2. staged: `run_staged` with stages {'screen': 'cupti', 'top_k': 3}: a cupti screen (events
   where cupti cannot run) of every candidate, then ncu over the reference and the top 3.

It prints both wall times and staged/all (goal: <= 0.5), and whether the staged top 3 are
among the fastest by ncu's own times of the 'all' run. Both are measured in this command.
Keep it under 10 minutes: `--candidates 8` shrinks it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from nsight_core.pipeline import run_profile_job  # noqa: E402
from nsight_core.request import ProfileRequest  # noqa: E402
from nsight_core.results import ProfileResult  # noqa: E402
from nsight_core.stages import run_staged  # noqa: E402

NCU_TIME = "gpu__time_duration.sum"
METRICS = [
    NCU_TIME,
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "smsp__inst_executed.sum",
    "l1tex__t_bytes.sum",
    "lts__t_bytes.sum",
    "smsp__warps_launched.sum",
    "sm__cycles_elapsed.avg.per_second",
]
"""Issue 12's ten metrics; percentages and rates are folded by max, counts and times summed."""
COMBINE = {m: ("max" if ".pct_" in m or "per_second" in m else "sum") for m in METRICS}
SHAPE = {"rows": 4096, "cols": 1024}
TOP_K = 3
GOAL_RATIO = 0.5
EXTRA_PASSES = 6
"""Candidate i runs i % EXTRA_PASSES extra elementwise passes before the softmax."""


def candidate_names(n: int) -> list[str]:
    return [f"c{i:02d}" for i in range(n)]


def candidate_source(n: int) -> str:
    """Inline source: the reference, the input maker and `n` candidates of graded speed.

    Candidates are listed slowest first within each group of EXTRA_PASSES, so the request's
    order is not the ranking.
    """
    lines = [
        "import torch",
        "",
        "def make_inputs(rows, cols):",
        "    return (torch.randn(rows, cols, device='cuda'),)",
        "",
        "def reference(x):",
        "    return torch.softmax(x, dim=1)",
        "",
        "def _variant(extra):",
        "    def softmax(x):",
        "        y = x",
        "        for _ in range(extra):",
        "            y = y * 1.0  # one more kernel; same values",
        "        return torch.softmax(y, dim=1)",
        "    return softmax",
        "",
    ]
    for i, name in enumerate(candidate_names(n)):
        lines.append(f"{name} = _variant({extra_passes(i)})")
    return "\n".join(lines) + "\n"


def extra_passes(i: int) -> int:
    return EXTRA_PASSES - 1 - i % EXTRA_PASSES


def base_request(n: int, runs: int) -> dict[str, object]:
    return {
        "reference": "reference",
        "candidates": candidate_names(n),
        "inputs": "make_inputs",
        "source": candidate_source(n),
        "reference_source": candidate_source(n),
        "configs": [SHAPE],
        "metrics": METRICS,
        "runs": runs,
        "kernels": {"combine": COMBINE},
        "check": {"seeds": 1},
        "time_limit_s": 540.0,
        "wait_s": 0.0,
    }


def ncu_times(result: ProfileResult, stage: str | None) -> dict[str, float]:
    return {
        r.Annotation: r.MedianValue
        for r in result.rows
        if r.Metric == NCU_TIME and r.Stage == stage and r.MedianValue is not None
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--candidates", type=int, default=32, help="how many (4-32)")
    p.add_argument("--runs", type=int, default=3, help="runs per candidate")
    p.add_argument("--json", type=Path, default=None, help="write the numbers here")
    args = p.parse_args(argv)
    n = max(TOP_K + 1, min(32, args.candidates))
    all_request = ProfileRequest.model_validate(base_request(n, args.runs))
    staged_request = ProfileRequest.model_validate(
        base_request(n, args.runs) | {"stages": {"screen": "cupti", "top_k": TOP_K}}
    )
    with tempfile.TemporaryDirectory(prefix="nspy-bench-stages-") as tmp:
        work = Path(tmp)
        t0 = time.monotonic()
        everything = run_profile_job(all_request, work / "all", result_id="all")
        all_s = time.monotonic() - t0
        t0 = time.monotonic()
        staged = run_staged(staged_request, work / "staged", result_id="staged")
        staged_s = time.monotonic() - t0
    by_ncu = ncu_times(everything, None)
    fastest = sorted((t, a) for a, t in by_ncu.items() if a != "reference")
    kept = [r.Annotation for r in staged.stages[0].Ranking if r.Kept] if staged.stages else []
    # Candidates with the same number of passes tie; a kept one is right if no candidate
    # with fewer passes was left out.
    best_passes = sorted(extra_passes(int(a[1:])) for a in candidate_names(n))[:TOP_K]
    kept_passes = sorted(extra_passes(int(a[1:])) for a in kept)
    ratio = staged_s / all_s if all_s > 0 else float("nan")
    lines = [
        f"{n} candidates, {len(METRICS)} metrics, {args.runs} runs, shape {SHAPE}",
        f"all under ncu: {all_s:.1f} s ({everything.status}: {everything.message[:200]})",
        f"staged (screen + ncu top {TOP_K}): {staged_s:.1f} s ({staged.status})",
    ]
    for s in staged.stages:
        lines.append(f"  stage {s.Stage} ({s.Backend}): {s.Status}, {s.WallSeconds} s")
    lines += [
        f"staged / all: {ratio:.3f} (goal <= {GOAL_RATIO})",
        f"kept {kept} (extra passes {kept_passes}; fewest possible {best_passes}): "
        + ("matches" if kept_passes == best_passes else "DIFFERS"),
        "fastest 5 by ncu over all: " + ", ".join(f"{a} {t / 1000:.1f} us" for t, a in fastest[:5]),
    ]
    sys.stdout.write("\n".join(lines) + "\n")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "candidates": n,
                    "all_s": all_s,
                    "staged_s": staged_s,
                    "ratio": ratio,
                    "kept": kept,
                    "stages": [s.model_dump() for s in staged.stages],
                    "ncu_all": by_ncu,
                    "ncu_staged": ncu_times(staged, "profile"),
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
