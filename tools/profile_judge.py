#!/usr/bin/env python3
"""Where the judge's time goes in a job: py-spy samples of the judge, by what it was doing.

    python tools/profile_judge.py [--backend ncu|cupti|events] [--runs 3] [--top 25]

The judge's share of a job (`provenance.phase_seconds['judge']` over the job's wall time)
is the price of the checks every call gets: inputs, the reference's output, the output
comparison, repeats, decoys and regimes. A share is one number; this says what makes it.
It runs the softmax bench's request (tools/bench/bench_softmax.py: torch's softmax against
a Triton one, two shapes) on a GPU host, or the numpy demo on a CPU one, under
``py-spy record --subprocesses`` (sampling every process of the job from outside; it
needs ptrace, which root has), then prints, for the judge process alone:

- its samples under the config loop (`judge/config_run.py`), by the chain of the judge's
  own steps below it (e.g. ``_one > _checked_call > _judge``);
- the leaf functions those samples ended in (numpy, torch, our comparison);
- the job's phase seconds, as its provenance states them.

py-spy comes from PyPI (``pip install py-spy``; for an offline GPU host, put its
manylinux wheel in the wheelhouse: ``pip download py-spy --only-binary=:all:
--platform manylinux_2_28_x86_64 --python-version 3.12 -d .whl``).
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tools" / "bench")]

import bench_softmax  # noqa: E402  (the bench's request is the one profiled on a GPU)

JUDGE_PROCESS = "nsight_core.judge"
CONFIG_LOOP = "run_config"


def _request(backend: str, runs: int, gpu: bool) -> dict[str, Any]:
    if gpu:
        return bench_softmax.bench_request(metrics=None, runs=runs, backend=backend)
    from nspy_mcp import demo_kernels as demo

    return {
        "reference": demo.REFERENCE,
        "candidates": [demo.VECTORIZED],
        "inputs": demo.INPUTS,
        "workdir": str(demo.DIRECTORY),
        "configs": [{"rows": 256, "cols": 512}, {"rows": 512, "cols": 512}],
        "runs": runs,
        "backend": "events",
    }


def inner(args: argparse.Namespace) -> int:
    """The job itself (run under py-spy by `main`)."""
    sys.path[:0] = [str(ROOT)]
    from nsight_core.pipeline import run_profile_job
    from nsight_core.request import ProfileRequest

    gpu = shutil.which("nvidia-smi") is not None
    request = ProfileRequest.model_validate(_request(args.backend, args.runs, gpu))
    with tempfile.TemporaryDirectory(prefix="nspy-judge-") as tmp:
        result = run_profile_job(request, Path(tmp) / "job", result_id="profile-judge")
    prov = result.provenance
    phases = {k: round(v, 3) for k, v in (prov.phase_seconds if prov else {}).items()}
    wall = prov.wall_seconds if prov and prov.wall_seconds else float("nan")
    share = phases.get("judge", float("nan")) / wall
    sys.stderr.write(
        f"job: {result.status} on {request.backend}, wall {wall:.2f} s, judge "
        f"{phases.get('judge', float('nan')):.3f} s ({100 * share:.1f} %)\n"
        f"phases (s): {json.dumps(phases)}\n"
    )
    return 0 if result.status == "done" else 1


def summarize(raw: Path, top: int) -> None:
    """The judge's samples by the chain of its steps below the config loop, and by leaf."""
    chains: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    judge_total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        procs = [f for f in frames if f.startswith("process ")]
        if not procs or JUDGE_PROCESS not in procs[-1]:
            continue  # another process: the server's side, the contestant
        n = int(count)
        judge_total += n
        loop = [i for i, f in enumerate(frames) if CONFIG_LOOP in f]
        if not loop:
            continue
        below = [f.split(" (")[0] for f in frames[loop[-1] + 1 :]]
        chains[" > ".join(below[:3]) or "(the loop itself)"] += n
        leaves[frames[-1][:120]] += n
    in_loop = sum(chains.values())
    print(f"judge process: {judge_total} samples, {in_loop} in its config loop ({CONFIG_LOOP})")
    print("== by step (the judge's own calls below the loop)")
    for chain, n in chains.most_common(top):
        print(f"{n:7d} {100 * n / max(in_loop, 1):5.1f} %  {chain}")
    print("== by leaf")
    for leaf, n in leaves.most_common(top):
        print(f"{n:7d} {100 * n / max(in_loop, 1):5.1f} %  {leaf}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--backend", choices=["ncu", "cupti", "events"], default="ncu")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.inner:
        return inner(args)
    # `pip install --target DIR` (tools/gpu_check.sh) puts its scripts in DIR/bin, off PATH.
    found = [Path(d) / "bin" / "py-spy" for d in sys.path if d]
    spy = shutil.which("py-spy") or next((str(f) for f in found if f.is_file()), None)
    if spy is None:
        raise SystemExit("py-spy is not installed: pip install py-spy (see this tool's docstring)")
    with tempfile.TemporaryDirectory(prefix="nspy-spy-") as tmp:
        raw = Path(tmp) / "samples.txt"
        cmd = [
            spy, "record", "--subprocesses", "--format", "raw", "-r", str(args.rate),
            "-o", str(raw), "--", sys.executable, __file__, "--inner",
            "--backend", args.backend, "--runs", str(args.runs),
        ]  # fmt: skip
        done = subprocess.run(cmd, timeout=900, check=False)
        if not raw.exists():
            raise SystemExit(f"py-spy wrote no samples (exit {done.returncode})")
        summarize(raw, args.top)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
