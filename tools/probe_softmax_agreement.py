"""Where a kernel's time under our ncu route differs from a raw ncu run: clock, cycles or work.

    python tools/probe_softmax_agreement.py [--rows 4096 --cols 1024] [--runs 10]

Measured from outside, torch's softmax at 4096x1024 read about 3 % faster through our ncu
route than through a raw ncu CLI run of the same script, every run, while every other kernel
of the softmax bench agreed within raw-against-raw spread. A duration is cycles over a
clock, so this probe collects, beside ``gpu__time_duration.sum``, the kernel's elapsed
cycles, its SM clock, DRAM bytes and launch shape, in four ways on one GPU, in one command:

1. raw: the bench's hand-written NVTX script under a plain ncu command (fresh inputs from
   ``torch.randn`` before each call);
2. raw, cloned: the same, but each call's input is a fresh clone of one tensor made at the
   start, as our contestant makes new arrays from the judge's slots;
3. raw, flags: the bench's script under the exact ncu flags our backend uses for a job;
4. ours: the same work as a `ProfileRequest` through the engine (ncu backend).

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

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

METRICS = [
    "gpu__time_duration.sum",
    "gpc__cycles_elapsed.max",
    "sm__cycles_elapsed.avg.per_second",
    "dram__cycles_elapsed.avg.per_second",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "launch__grid_size",
    "launch__block_size",
]

RAW = """
import sys, nvtx, torch
sys.path.insert(0, {examples!r})
import gpu_softmax_reference as k
rows, cols = {rows}, {cols}
k.torch_softmax(k.make_inputs(rows, cols)[0]); torch.cuda.synchronize()  # outside the ranges
base = k.make_inputs(rows, cols)[0]
for r in range({runs}):
    x = base.clone() if {cloned} else k.make_inputs(rows, cols)[0]
    torch.cuda.synchronize()
    rid = nvtx.start_range(message=f"r{{r}}", domain="nspy")
    k.torch_softmax(x); torch.cuda.synchronize()
    nvtx.end_range(rid)
"""


TORCH_KERNEL = "softmax_warp_forward"
"""torch's softmax kernel at these shapes: the one kernel every way is compared on (our
job's report also holds the Triton candidate's kernel, which the raw runs do not launch)."""


def _read(report: Path) -> dict[str, list[float | str]]:
    import ncu_report

    out: dict[str, list[float | str]] = {m: [] for m in [*METRICS, "name"]}
    for rng in ncu_report.load_report(str(report)):
        for i in range(len(rng)):
            action = rng[i]
            name = action.name()
            if TORCH_KERNEL not in name:
                continue  # the prime, copies, fills, the candidate's kernel
            out["name"].append(name)
            for m in METRICS:
                metric = action.metric_by_name(m)
                out[m].append(float(metric.value()) if metric is not None else float("nan"))
    return out


def raw(
    work: Path, tag: str, args: argparse.Namespace, *, cloned: bool, flags: list[str]
) -> dict[str, list[float | str]]:
    script = work / f"{tag}.py"
    script.write_text(
        RAW.format(
            examples=str(EXAMPLES), rows=args.rows, cols=args.cols, runs=args.runs, cloned=cloned
        ),
        encoding="utf-8",
    )
    report = work / f"{tag}.ncu-rep"
    cmd = [
        os.environ.get("NSPY_NCU", "ncu"), "--nvtx", "--nvtx-include", "regex:nspy@.+",
        "--metrics", ",".join(METRICS), *flags, "--target-processes", "all",
        "-f", "-o", str(report), sys.executable, str(script),
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"{tag}: ncu exited {done.returncode}: {done.stdout[-2000:]} {done.stderr[-2000:]}"
        )
    return _read(report)


def ours(work: Path, args: argparse.Namespace) -> tuple[dict[str, list[float | str]], list[str]]:
    from nsight_core.pipeline import run_profile_job
    from nsight_core.request import ProfileRequest

    request = ProfileRequest.model_validate(
        {
            "reference": "gpu_softmax_reference.py:torch_softmax",
            "candidates": ["gpu_softmax.py:triton_softmax"],
            "inputs": "gpu_softmax_reference.py:make_inputs",
            "workdir": str(EXAMPLES),
            "configs": [{"rows": args.rows, "cols": args.cols}],
            "metrics": METRICS,
            "runs": args.runs,
            "backend": "ncu",
        }
    )
    job_dir = work / "ours"
    result = run_profile_job(request, job_dir, result_id="probe")
    if result.status != "done":
        raise RuntimeError(f"ours: {result.status}: {result.message}")
    argv = list(result.provenance.command) if result.provenance is not None else []
    reports = sorted(job_dir.rglob("*.ncu-rep"))
    return _read(reports[0]), argv


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
    args = p.parse_args(argv)
    sys.path[:0] = [str(ROOT), str(EXAMPLES)]
    work = Path(tempfile.mkdtemp(prefix="nspy-probe-"))
    plain = ["--cache-control", "all", "--clock-control", "none"]
    try:
        ways: dict[str, dict[str, list[float | str]]] = {}
        ways["raw"] = raw(work, "raw", args, cloned=False, flags=plain)
        ways["raw, cloned"] = raw(work, "cloned", args, cloned=True, flags=plain)
        mine, cmd = ours(work, args)
        flags = _flags_of(cmd)
        print("our ncu command:", " ".join(cmd[: cmd.index("--") if "--" in cmd else 40]))
        ways["raw, our flags"] = raw(work, "flags", args, cloned=False, flags=flags or plain)
        ways["ours"] = mine
        ways["raw again"] = raw(work, "raw2", args, cloned=False, flags=plain)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = ways["raw"]
    print(
        f"torch softmax {args.rows}x{args.cols}, {args.runs} runs; mean per way (deviation from raw)"
    )
    for way, vals in ways.items():
        names = sorted({str(n) for n in vals["name"]})
        print(f"== {way}: {len(vals['name'])} kernels {names}")
        for m in METRICS:
            xs = [float(v) for v in vals[m]]
            b = [float(v) for v in base[m]]
            if not xs or not b:
                print(f"   {m}: no values")
                continue
            mean, bmean = statistics.fmean(xs), statistics.fmean(b)
            dev = 100 * (mean / bmean - 1) if bmean else float("nan")
            spread = 100 * statistics.pstdev(xs) / mean if mean else float("nan")
            print(f"   {m:40s} {mean:14.6g}  ({dev:+6.2f} %, rsd {spread:.2f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
