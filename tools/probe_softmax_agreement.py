"""Where a kernel's time under our ncu route differs from a raw ncu run: clock, cycles or work.

    python tools/probe_softmax_agreement.py [--rows 4096 --cols 1024] [--runs 10]
        [--metric-set clocks|bench] [--shapes one|bench] [--mcp]

Measured from outside, torch's softmax at 4096x1024 read about 3 % faster through our ncu
route than through a raw ncu CLI run of the same script, every run, while every other kernel
of the softmax bench agreed within raw-against-raw spread. A duration is cycles over a
clock, so this probe collects, beside ``gpu__time_duration.sum``, the kernel's elapsed
cycles, its SM clock, DRAM bytes and launch shape, in several ways on one GPU, in one
command:

1. raw: a hand-written NVTX script under a plain ncu command (fresh inputs from
   ``torch.randn`` before each call), torch's softmax alone;
2. raw, with triton: the bench's raw script (tools/bench/bench_softmax.py): torch and the
   Triton softmax alternating per run, on every shape;
3. raw, cloned: as 1, but each call's input is a fresh clone of one tensor made at the
   start, as our contestant makes new arrays from the judge's slots;
4. raw, flags: as 1, under the exact ncu flags our backend uses for a job;
5. ours: the bench's request (reference torch, candidate Triton) through the engine;
6. with ``--mcp``, mcp: that request through `profile_candidates` on a server whose second
   request goes to its pre-started judge, the bench's route (the second is read).

Only torch's kernel at the first shape is compared (by name and grid). The job's shape is
what differs between the bench, where the bias showed, and this probe's first version, where
it did not: ``--metric-set bench`` collects the bench's two metrics only (the clocks then
come from a separate ``clocks`` run), ``--shapes bench`` adds the bench's second shape, and
``--mcp`` adds the bench's route; each way is one arm, so one command splits the job's shape.

It prints each way's mean per metric and its deviation from the first raw run's: a
different clock says the GPU's state differs, different cycles at one clock say the work
or its memory differs, a different grid or kernel name says another variant ran.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
sys.path[:0] = [str(ROOT / "tools" / "bench")]

import bench_softmax  # noqa: E402  (the bench whose job this probe splits)

CLOCKS = [
    "gpu__time_duration.sum",
    "gpc__cycles_elapsed.max",
    "sm__cycles_elapsed.avg.per_second",
    "dram__cycles_elapsed.avg.per_second",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "launch__grid_size",
    "launch__block_size",
]
BENCH = bench_softmax.METRICS
"""The bench's metrics: its job replays each kernel for these only."""
BENCH_SHAPES = bench_softmax.SHAPES

RAW = """
import sys, nvtx, torch
sys.path.insert(0, {examples!r})
import gpu_softmax as k
fns = {{"torch": k.torch_softmax, "triton": k.triton_softmax}}
names = {names!r}
for c, (rows, cols) in enumerate({shapes!r}):
    for n in names:  # warm-up outside the ranges
        fns[n](k.make_inputs(rows, cols)[0]); torch.cuda.synchronize()
    base = k.make_inputs(rows, cols)[0]
    for r in range({runs}):
        for n in names:
            x = base.clone() if {cloned} else k.make_inputs(rows, cols)[0]
            torch.cuda.synchronize()
            rid = nvtx.start_range(message=f"c{{c}}:r{{r}}:{{n}}", domain="nspy")
            fns[n](x); torch.cuda.synchronize()
            nvtx.end_range(rid)
"""

TORCH_KERNEL = "softmax_warp_forward"
"""torch's softmax kernel at the first shape: the one kernel every way is compared on (a
job's report also holds the Triton candidate's kernel, copies and the prime)."""

Values = dict[str, list[float | str]]


def _read(report: Path, metrics: list[str], grid: float | None) -> Values:
    """torch's kernel's values (of ``grid`` blocks when given: the first shape's)."""
    import ncu_report

    out: Values = {m: [] for m in [*metrics, "name"]}
    for rng in ncu_report.load_report(str(report)):
        for i in range(len(rng)):
            action = rng[i]
            name = action.name()
            if TORCH_KERNEL not in name:
                continue
            blocks = action.metric_by_name("launch__grid_size")
            if grid is not None and blocks is not None and float(blocks.value()) != grid:
                continue
            out["name"].append(name)
            for m in metrics:
                metric = action.metric_by_name(m)
                out[m].append(float(metric.value()) if metric is not None else float("nan"))
    return out


def _metrics(args: argparse.Namespace) -> list[str]:
    # The grid size is collected in every way, so a second shape's kernel is told apart.
    chosen = BENCH if args.metric_set == "bench" else CLOCKS
    return chosen + [m for m in ("launch__grid_size",) if m not in chosen]


def _shapes(args: argparse.Namespace) -> list[tuple[int, int]]:
    first = (args.rows, args.cols)
    return [first] + [s for s in BENCH_SHAPES if s != first] if args.shapes == "bench" else [first]


def raw(
    work: Path,
    tag: str,
    args: argparse.Namespace,
    *,
    cloned: bool = False,
    triton: bool = False,
    flags: list[str],
    metrics: list[str] | None = None,
) -> Values:
    metrics = metrics or _metrics(args)
    script = work / f"{tag}.py"
    script.write_text(
        RAW.format(
            examples=str(EXAMPLES),
            names=["torch", "triton"] if triton else ["torch"],
            shapes=_shapes(args),
            runs=args.runs,
            cloned=cloned,
        ),
        encoding="utf-8",
    )
    report = work / f"{tag}.ncu-rep"
    cmd = [
        os.environ.get("NSPY_NCU", "ncu"), "--nvtx", "--nvtx-include", "regex:nspy@.+",
        "--metrics", ",".join(metrics), *flags, "--target-processes", "all",
        "-f", "-o", str(report), sys.executable, str(script),
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"{tag}: ncu exited {done.returncode}: {done.stdout[-2000:]} {done.stderr[-2000:]}"
        )
    return _read(report, metrics, args.grid)


def _request(args: argparse.Namespace) -> dict[str, Any]:
    return bench_softmax.bench_request(_shapes(args), metrics=_metrics(args), runs=args.runs)


def ours(work: Path, args: argparse.Namespace) -> tuple[Values, list[str]]:
    from nsight_core.pipeline import run_profile_job
    from nsight_core.request import ProfileRequest

    job_dir = work / "ours"
    result = run_profile_job(
        ProfileRequest.model_validate(_request(args)), job_dir, result_id="probe"
    )
    if result.status != "done":
        raise RuntimeError(f"ours: {result.status}: {result.message}")
    argv = list(result.provenance.command) if result.provenance is not None else []
    reports = sorted(job_dir.rglob("*.ncu-rep"))
    return _read(reports[0], _metrics(args), args.grid), argv


def mcp(work: Path, args: argparse.Namespace) -> Values:
    """The request through a server's pre-started judge (its second request), as the bench
    sends it; the report is read from the server's store."""
    import anyio
    from mcp import Client, StdioServerParameters

    store = work / "store"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nspy_mcp", "serve", "--store", str(store)],
        env=dict(os.environ),
    )

    async def two() -> str:
        async with Client(params) as client:
            report = ""
            for _ in range(2):
                answer = await client.call_tool(
                    "profile_candidates", {"request": {**_request(args), "wait_s": 600}}
                )
                done = answer.structured_content or {}
                if answer.is_error or done.get("status") != "done":
                    raise RuntimeError(f"mcp: {answer.content}")
                report = str((done.get("artifacts") or {}).get("report", ""))
                await anyio.sleep(3)  # an agent reads: the pair for the next is started
            return report

    named = anyio.run(two)
    # The answer names its report where it lists artifacts; else the store's newest.
    found = sorted(store.rglob("*.ncu-rep"), key=lambda f: f.stat().st_mtime)
    report = Path(named) if named and Path(named).is_file() else (found[-1] if found else None)
    if report is None:
        raise RuntimeError(f"mcp: the second request left no report under {store}")
    return _read(report, _metrics(args), args.grid)


def _flags_of(argv: list[str]) -> list[str]:
    """Our job's ncu flags that shape a measurement (cache, clock, replay, sections)."""
    keep = {
        "--cache-control",
        "--clock-control",
        "--replay-mode",
        "--section-folder",
        "--section",
        "--graph-profiling",
    }
    out: list[str] = []
    for i, a in enumerate(argv):
        if a in keep and i + 1 < len(argv):
            out += [a, argv[i + 1]]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--cols", type=int, default=1024)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--metric-set", choices=["clocks", "bench"], default="clocks")
    p.add_argument("--shapes", choices=["one", "bench"], default="one")
    p.add_argument("--mcp", action="store_true", help="add the bench's route (a server)")
    args = p.parse_args(argv)
    args.grid = None
    sys.path[:0] = [str(ROOT), str(EXAMPLES)]
    work = Path(tempfile.mkdtemp(prefix="nspy-probe-"))
    plain = ["--cache-control", "all", "--clock-control", "none"]
    try:
        ways: dict[str, Values] = {}
        ways["raw"] = raw(work, "raw", args, flags=plain)
        grids = {float(g) for g in ways["raw"]["launch__grid_size"]}
        args.grid = grids.pop() if len(grids) == 1 else None
        ways["raw, with triton"] = raw(work, "triton", args, triton=True, flags=plain)
        ways["raw, cloned"] = raw(work, "cloned", args, cloned=True, flags=plain)
        mine, cmd = ours(work, args)
        flags = _flags_of(cmd)
        print("our ncu command:", " ".join(cmd[: cmd.index("--") if "--" in cmd else 40]))
        ways["raw, our flags"] = raw(work, "flags", args, flags=flags or plain)
        ways["ours"] = mine
        if args.mcp:
            ways["mcp, pre-started"] = mcp(work, args)
        ways["raw again"] = raw(work, "raw2", args, flags=plain)
        if args.metric_set == "bench":  # the clocks, in a run of their own
            ways["raw, clocks"] = raw(work, "clocks", args, flags=plain, metrics=CLOCKS)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = ways["raw"]
    print(
        f"torch softmax {args.rows}x{args.cols} (grid {args.grid}), {args.runs} runs, "
        f"metrics {args.metric_set}, shapes {_shapes(args)}; mean per way (deviation from raw)"
    )
    for way, vals in ways.items():
        names = sorted({str(n) for n in vals["name"]})
        print(f"== {way}: {len(vals['name'])} kernels {names}")
        for m in [k for k in vals if k != "name"]:
            xs = [float(v) for v in vals[m]]
            b = [float(v) for v in base.get(m, [])]
            if not xs:
                print(f"   {m}: no values")
                continue
            mean = statistics.fmean(xs)
            bmean = statistics.fmean(b) if b else float("nan")
            dev = 100 * (mean / bmean - 1) if bmean else float("nan")
            spread = 100 * statistics.pstdev(xs) / mean if mean else float("nan")
            print(f"   {m:50s} {mean:14.6g}  ({dev:+6.2f} %, rsd {spread:.2f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
