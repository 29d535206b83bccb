"""Staged evaluation against profiling every candidate under ncu, per goal, in one command.

Run on a GPU host with ncu, torch and (for the cupti screen) cupti-python:

    python tools/bench/bench_stages.py [--runs 3] [--force-screen] [--json OUT.json]

Workload: torch softmax candidates, each `torch.softmax` after 0-5 extra elementwise passes
over its input (so they differ in speed, and several tie), against torch.softmax as the
reference (in a file of its own), on 4096x1024 fp32. Two cases, issue 27's goals:

- `32x10`: 32 candidates with the ten metrics of issue 12 (several replay passes): the
  screen must pay (goal: staged/all <= 0.3);
- `8x2`: 8 candidates with the first two of them: staging must never be slower than one
  ncu job (goal: staged/all <= 1.0; the server skips a screen that cannot pay).

For each case: `all` is one `run_profile_job` under ncu over every candidate; `staged` is
`run_staged` with stages {'screen': 'cupti', 'top_k': 3}, which decides from the request
whether to screen (nsight_core/staging/cost.py). The bench prints both wall times, their
ratio, the estimate the decision came from beside what was measured, and the constants this
run implies (to refit `H200_COSTS`; docs/stages.md says how they were fitted).
`--force-screen` screens every case whatever the estimate says (to measure the screen).

Without ncu (a CPU host, CI) events stands in for ncu, the requests keep ncu's default
metric only and the shape is smaller; the screen runs where the estimate for the real
request says it pays. The numbers then show only that the bench and both paths run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from nsight_core.errors import NsightCoreError  # noqa: E402
from nsight_core.pipeline import preflight, run_profile_job  # noqa: E402
from nsight_core.plan.config import EngineConfig  # noqa: E402
from nsight_core.request import ProfileRequest  # noqa: E402
from nsight_core.results import ProfileResult  # noqa: E402
from nsight_core.stages import run_staged  # noqa: E402
from nsight_core.staging.cost import H200_COSTS, StagingEstimate, estimate_staging  # noqa: E402

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
SHAPE = {"rows": 4096, "cols": 1024}
CPU_SHAPE = {"rows": 256, "cols": 1024}
TOP_K = 3
EXTRA_PASSES = 6
"""Candidate i runs i % EXTRA_PASSES extra elementwise passes before the softmax."""
REFERENCE = "reference.py:reference"
INPUTS = "reference.py:make_inputs"
REFERENCE_SOURCE = """import torch

def make_inputs(rows, cols):
    device = 'cuda' if torch.cuda.is_available() else 'cpu'
    return (torch.randn(rows, cols, device=device),)

def reference(x):
    return torch.softmax(x, dim=1)
"""


@dataclass(frozen=True)
class Case:
    name: str
    candidates: int
    metrics: list[str]
    goal: float
    """The most staged/all may be (issue 27)."""


CASES = [
    Case("32x10", 32, METRICS, 0.3),
    Case("8x2", 8, METRICS[:2], 1.0),
]


def candidate_names(n: int) -> list[str]:
    return [f"c{i:02d}" for i in range(n)]


def candidate_source(n: int) -> str:
    """Inline source of `n` candidates of graded speed (the reference is in its own file).

    Candidates are listed slowest first within each group of EXTRA_PASSES, so the request's
    order is not the ranking.
    """
    lines = [
        "import torch",
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


def base_request(
    n: int,
    runs: int,
    workdir: Path,
    metrics: list[str] | None = None,
    shape: dict[str, int] | None = None,
) -> dict[str, Any]:
    """The request's fields; writes the reference's file into `workdir`."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "reference.py").write_text(REFERENCE_SOURCE)
    metrics = METRICS if metrics is None else metrics
    return {
        "reference": REFERENCE,
        "candidates": candidate_names(n),
        "inputs": INPUTS,
        "source": candidate_source(n),
        "workdir": str(workdir),
        "configs": [shape or SHAPE],
        "metrics": metrics,
        "runs": runs,
        "kernels": {"combine": {m: combine_of(m) for m in metrics}},
        "check": {"seeds": 1},
        "time_limit_s": 540.0,
        "wait_s": 0.0,
    }


def combine_of(metric: str) -> str:
    return "max" if ".pct_" in metric or "per_second" in metric else "sum"


def ncu_times(result: ProfileResult, stage: str | None) -> dict[str, float]:
    return {
        r.Annotation: r.MedianValue
        for r in result.rows
        if r.Metric == NCU_TIME and r.Stage == stage and r.MedianValue is not None
    }


def ncu_here(request: ProfileRequest) -> bool:
    try:
        preflight(request, EngineConfig.from_env())
    except NsightCoreError as err:
        sys.stderr.write(f"no ncu here ({err.message}): events stands in for it\n")
        return False
    return True


@dataclass
class Outcome:
    case: str
    stand_in: bool
    all_s: float
    staged_s: float
    """Medians of the walls below."""
    all_walls: list[float]
    staged_walls: list[float]
    ratio: float
    goal: float
    screened: bool
    estimate: dict[str, float]
    stages: list[dict[str, Any]]
    kept: list[str]
    kept_fastest: bool | None
    """The top k the screen kept are among the fewest extra passes (ties are equal)."""
    implied: dict[str, float]


def implied_costs(est: StagingEstimate, all_s: float, staged: ProfileResult) -> dict[str, float]:
    """The per-call constants this run implies, at the model's start costs (docs/stages.md)."""
    out = {"ncu_call_pass_s": (all_s - H200_COSTS.ncu_start_s) / est.ncu_units(est.callables)}
    screen = next((s for s in staged.stages if s.Stage == "screen"), None)
    if screen is not None and screen.WallSeconds is not None:
        out["screen_call_s"] = (screen.WallSeconds - H200_COSTS.screen_start_s) / est.screen_calls(
            est.callables
        )
    return out


def run_case(
    case: Case, runs: int, work: Path, stand_in: bool, force: bool, repeats: int = 1
) -> Outcome:
    real = ProfileRequest.model_validate(
        base_request(case.candidates, runs, work / "src", case.metrics)
        | {"stages": {"screen": "cupti", "top_k": TOP_K}}
    )
    est = estimate_staging(real, H200_COSTS, EngineConfig.from_env())
    if stand_in:
        # events times in the candidate's process and measures time only: the requests keep
        # ncu's default metric, and the screen runs where the real request's estimate says.
        fields = base_request(case.candidates, runs, work / "src", [NCU_TIME], CPU_SHAPE)
        all_request = ProfileRequest.model_validate(fields | {"backend": "events"})
        staged_request = ProfileRequest.model_validate(
            fields | {"stages": {"screen": "cupti", "top_k": TOP_K}}
        )
        options: dict[str, Any] = {
            "config": dataclasses.replace(EngineConfig.from_env(), profile_backend="events"),
            "costs": H200_COSTS,
            "force_screen": force or est.pays,
        }
    else:
        all_request = real.model_copy(update={"stages": None})
        staged_request = real
        options = {"force_screen": force}
    all_walls: list[float] = []
    staged_walls: list[float] = []
    for i in range(repeats):
        # Alternate which goes first: a later job finds caches and clocks warmer.
        for label in ("all", "staged") if i % 2 == 0 else ("staged", "all"):
            t0 = time.monotonic()
            if label == "all":
                everything = run_profile_job(
                    all_request, work / f"{case.name}-all-{i}", result_id="all"
                )
                all_walls.append(time.monotonic() - t0)
            else:
                staged = run_staged(
                    staged_request,
                    work / f"{case.name}-staged-{i}",
                    result_id="staged",
                    **options,
                )
                staged_walls.append(time.monotonic() - t0)
    all_s, staged_s = statistics.median(all_walls), statistics.median(staged_walls)
    screened = bool(staged.stages) and staged.stages[0].Status != "skipped"
    ranking = staged.stages[0].Ranking if staged.stages else []
    kept = [r.Annotation for r in ranking if r.Kept and r.Rank is not None and r.Rank <= TOP_K]
    best = sorted(extra_passes(i) for i in range(case.candidates))[:TOP_K]
    kept_passes = sorted(extra_passes(int(a[1:])) for a in kept)
    for label, result in (("all", everything), ("staged", staged)):
        if result.status != "done":
            sys.stderr.write(f"{case.name} {label}: {result.status}: {result.message[:400]}\n")
    return Outcome(
        case=case.name,
        stand_in=stand_in,
        all_s=all_s,
        staged_s=staged_s,
        all_walls=all_walls,
        staged_walls=staged_walls,
        ratio=staged_s / all_s if all_s > 0 else float("nan"),
        goal=case.goal,
        screened=screened,
        estimate={
            "screen_s": est.screen_s,
            "kept_ncu_s": est.kept_ncu_s,
            "staged_s": est.staged_s,
            "all_ncu_s": est.all_ncu_s,
            "passes": est.passes,
            "timed": est.timed,
            "untimed": est.untimed,
            "screen_untimed": est.screen_untimed,
            "pays": est.pays,
        },
        stages=[s.model_dump(exclude={"Ranking"}) for s in staged.stages],
        kept=kept,
        kept_fastest=kept_passes == best if kept else None,
        implied=implied_costs(est, all_s, staged) if not stand_in else {},
    )


def _walls(walls: list[float]) -> str:
    return "/".join(f"{w:.1f}" for w in walls)


def report(o: Outcome) -> list[str]:
    e = o.estimate
    # The all-under-ncu job against itself: a ratio within that spread is no difference.
    spread = max(o.all_walls) / min(o.all_walls) if len(o.all_walls) > 1 else 1.0
    met = (
        "met"
        if o.ratio <= o.goal
        else f"met within noise (all vs all: {spread:.3f})"
        if o.ratio <= o.goal * spread
        else "NOT met"
    )
    lines = [
        f"[{o.case}] staged / all: {o.ratio:.3f} (goal <= {o.goal}: {met})"
        + (" [events standing in for ncu]" if o.stand_in else ""),
        f"  all under ncu: {o.all_s:.1f} s; staged: {o.staged_s:.1f} s "
        f"({'screened' if o.screened else 'screen skipped'}; medians of "
        f"{len(o.all_walls)}: all {_walls(o.all_walls)}, staged {_walls(o.staged_walls)})",
        f"  estimate: screen {e['screen_s']:.1f} s + ncu top {TOP_K} {e['kept_ncu_s']:.1f} s = "
        f"{e['staged_s']:.1f} s against ncu over all {e['all_ncu_s']:.1f} s "
        f"({e['timed']} timed, {e['untimed']} untimed ({e['screen_untimed']} in the screen) "
        f"calls per config, {e['passes']} passes): " + ("screen" if e["pays"] else "skip"),
    ]
    for s in o.stages:
        lines.append(f"  stage {s['Stage']} ({s['Backend']}): {s['Status']}, {s['WallSeconds']} s")
    if o.kept:
        right = "the fastest" if o.kept_fastest else "NOT the fastest"
        lines.append(f"  kept {o.kept}: {right} by extra passes")
    if o.implied:
        lines.append(
            "  implied constants: "
            + ", ".join(
                f"{k} {v:.4f} (model {getattr(H200_COSTS, k)})" for k, v in o.implied.items()
            )
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--runs", type=int, default=3, help="runs per candidate")
    p.add_argument("--cases", nargs="*", default=[c.name for c in CASES], help="which goals")
    p.add_argument("--force-screen", action="store_true", help="screen every case")
    p.add_argument(
        "--repeats", type=int, default=1, help="pairs per case, in alternating order (medians)"
    )
    p.add_argument("--json", type=Path, default=None, help="write the numbers here")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="nspy-bench-stages-") as tmp:
        work = Path(tmp)
        probe = ProfileRequest.model_validate(base_request(4, 1, work / "src"))
        stand_in = not ncu_here(probe)
        for case in CASES:
            if case.name in args.cases:
                outcomes.append(
                    run_case(case, args.runs, work, stand_in, args.force_screen, args.repeats)
                )
    lines = [f"runs {args.runs}, shape {CPU_SHAPE if stand_in else SHAPE}, top_k {TOP_K}"]
    for o in outcomes:
        lines += report(o)
    sys.stdout.write("\n".join(lines) + "\n")
    if args.json:
        args.json.write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
