"""Record the diagnose fixtures (tests/data/ncu/diagnose_*.ncu-rep) and print their diagnoses.

Run it on a GPU host with ncu, CUDA torch and the `nvtx` package, from the repository root:

    python tools/record_diagnose_fixtures.py            # writes tests/data/ncu/, ~1-2 minutes
    python tools/record_diagnose_fixtures.py --out /tmp/diag --cases diagnose_tiny

Four cases, one config and 3 runs each, the annotation named after the case (a run with
``--cases`` adds to the manifest):

- ``diagnose_softmax``: ``torch.softmax`` over 4096x4096 fp32 (compute-bound by ncu's
  SpeedOfLight: SM 70 %, DRAM 44 % on the H200);
- ``diagnose_copy``: ``torch.mul(x, 2, out=y)`` over 2^26 fp32 (memory-bound);
- ``diagnose_matmul``: a bf16 4096^3 ``torch.matmul`` (compute-bound, tensor pipe);
- ``diagnose_tiny``: ``torch.add`` on 32 elements, one block (latency-bound).

Each runs as ``ncu <our flags> python child.py CASE`` with the flags of
`build_ncu_command` and exactly the metrics and sections ``diagnose`` adds, so the reports
are what the collector produces. Inputs are made and every kernel is warmed up outside the
NVTX ranges. After each case the script reads the report back with `diagnose_run` and
prints the diagnosis (bound, percentages, DRAM share against bytes/time, rules) and ncu's
pass count from its log. Nothing is faked: tests/core/test_diagnose.py checks the bounds.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nsight_core.collectors.ncu import build_ncu_command, find_ncu, ncu_version
from nsight_core.collectors.ncu_diagnose import DIAGNOSE_SECTIONS, diagnose_metrics
from nsight_core.plan.config import EngineConfig
from nsight_core.request import DEFAULT_METRIC
from nsight_core.rows.diagnose import diagnose_run

CASES = {
    "diagnose_softmax": (
        "torch.softmax(x, dim=-1), x 4096x4096 fp32: compute-bound by ncu's SpeedOfLight on "
        "the H200 (SM 70 %, DRAM 44 %: torch's kernel spends its time in exp and reductions)"
    ),
    "diagnose_copy": (
        "torch.mul(x, 2, out=y), 2^26 fp32 elements (256 MiB each way): memory-bound "
        "(a kernel; y.copy_(x) is a cudaMemcpy, which ncu does not profile)"
    ),
    "diagnose_matmul": "torch.matmul(a, b), bf16 4096x4096 @ 4096x4096: compute-bound",
    "diagnose_tiny": "torch.add(x, y), 32 fp32 elements (one block): latency-bound",
}
RUNS = 3
CASE_TIMEOUT_S = 120.0
"""One case takes seconds on an H200 (the matmul's replays dominate); four fit in ~1 min."""

CHILD_SOURCE = r'''
"""Diagnose fixture workload run under ncu by tools/record_diagnose_fixtures.py."""
import sys

import nvtx
import torch

case, runs = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
dev = "cuda"
if case == "diagnose_softmax":
    x = torch.randn(4096, 4096, device=dev, dtype=torch.float32)
    call = lambda: torch.softmax(x, dim=-1)  # noqa: E731
elif case == "diagnose_copy":
    x = torch.randn(1 << 26, device=dev)
    y = torch.empty_like(x)
    call = lambda: torch.mul(x, 2.0, out=y)  # noqa: E731
elif case == "diagnose_matmul":
    a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    call = lambda: torch.matmul(a, b)  # noqa: E731
elif case == "diagnose_tiny":
    x = torch.randn(32, device=dev)
    y = torch.randn(32, device=dev)
    call = lambda: torch.add(x, y)  # noqa: E731
else:
    raise SystemExit(f"unknown case {case}")
for _ in range(2):  # warm up outside any range: cuBLAS heuristics, allocator
    call()
torch.cuda.synchronize()
for run in range(runs):
    rid = nvtx.start_range(message=f"c0:r{run}:{case}", domain="nspy")
    call()
    nvtx.end_range(rid)
    torch.cuda.synchronize()
'''


def _passes(log_text: str) -> list[int]:
    """ncu's '==PROF== Profiling "kernel": 0%....100% - N passes' counts, in order."""
    return [int(n) for n in re.findall(r"- (\d+) passes", log_text)]


def record(case: str, ncu: str, out: Path, child: Path) -> dict[str, object]:
    report, log = out / f"{case}.ncu-rep", out / f"{case}.ncu.log"
    cmd = build_ncu_command(
        ncu,
        metrics=diagnose_metrics([DEFAULT_METRIC]),
        sections=DIAGNOSE_SECTIONS,
        cache_control="all",
        clock_control="none",
        replay_mode="kernel",
        report_path=report,
        log_path=log,
        target_argv=[sys.executable, str(child), case, str(RUNS)],
    )
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CASE_TIMEOUT_S, check=False)
    wall = time.monotonic() - t0
    log_text = log.read_text(errors="replace") if log.exists() else ""
    entry: dict[str, object] = {
        "what": CASES[case],
        "command": cmd,
        "exit_code": proc.returncode,
        "wall_s": round(wall, 1),
        "passes": _passes(log_text),
        "size_bytes": report.stat().st_size if report.exists() else None,
    }
    if not report.exists():
        entry["error"] = proc.stderr[-2000:] or log_text[-2000:]
        return entry
    job = diagnose_run(
        report, diagnose=True, groups=[(case, 0)], configs=[{}], floor_events=[], gpu=None
    )
    d = job.diagnoses[0]
    entry["diagnosis"] = d.model_dump()
    if d.DramBytes is not None and d.TimeNs:
        entry["bytes_over_time_Bps"] = d.DramBytes / (d.TimeNs * 1e-9)
    return entry


def _line(case: str, entry: dict[str, object]) -> str:
    d = entry.get("diagnosis")
    if not isinstance(d, dict):
        return f"{case}: FAILED (exit {entry['exit_code']}): {entry.get('error', '')[:500]}\n"  # type: ignore[index]

    def pct(v: object) -> str:
        return f"{v:.1f} %" if isinstance(v, int | float) else "-"

    def tbps(v: object) -> str:
        return f"{v / 1e12:.3g}" if isinstance(v, int | float) else "-"

    bw, peak = tbps(d.get("DramBandwidth")), tbps(d.get("DramPeakBandwidth"))
    rules = "; ".join(f"{r['Rule']}[{r['Severity']}]: {r['Title']}" for r in d["Rules"]) or "-"
    return (
        f"{case}: bound={d['Bound']} time={d['TimeNs']} ns compute={pct(d['ComputeThroughputPct'])}"
        f" memory={pct(d['MemoryThroughputPct'])} tensor={pct(d['TensorPipePct'])}"
        f" dram={pct(d['DramPct'])} ({bw} of {peak} TB/s)"
        f" headroom={d['Headroom']} grid={d['GridSize']} passes={entry['passes']}"
        f" wall={entry['wall_s']} s size={entry['size_bytes']} B\n"
        f"  next: {d['NextStep']}\n  rules: {rules}\n  why: {' | '.join(d['Why'])}\n"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Record tests/data/ncu/diagnose_*.ncu-rep.")
    p.add_argument("--out", type=Path, default=Path("tests/data/ncu"), help="output directory")
    p.add_argument("--ncu", default=None, help="ncu executable (default: $NSPY_NCU or PATH)")
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated subset")
    args = p.parse_args(argv)
    ncu = args.ncu or find_ncu(EngineConfig.from_env())
    if ncu is None:
        sys.stderr.write("no ncu found: put it on PATH, set NSPY_NCU, or pass --ncu\n")
        return 2
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    child = Path(tempfile.mkdtemp(prefix="nspy-diagnose-")) / "diagnose_child.py"
    child.write_text(CHILD_SOURCE.lstrip())
    manifest = out / "diagnose_manifest.json"
    results: dict[str, object] = json.loads(manifest.read_text()) if manifest.exists() else {}
    results[f"ncu (cases of {time.strftime('%Y-%m-%d')})"] = ncu_version(ncu)
    ok = True
    for case in args.cases.split(","):
        try:
            entry = record(case, ncu, out, child)
        except subprocess.TimeoutExpired:
            entry = {"exit_code": -1, "error": f"timed out after {CASE_TIMEOUT_S} s"}
        results[case] = entry
        ok &= "diagnosis" in entry
        sys.stdout.write(_line(case, entry))
        sys.stdout.flush()
    manifest.write_text(json.dumps(results, indent=1, default=str) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
