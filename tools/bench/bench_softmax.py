"""Softmax sweep: our two routes against a hand-written raw `ncu` CLI run, in one command.

Run on a GPU host with ncu, torch and triton (tools/gpu_check.sh does):

    python tools/bench/bench_softmax.py [--json OUT.json]

The workload is Nsight Python's softmax example: torch softmax against a one-kernel Triton
softmax (examples/gpu_softmax.py), shapes 4096x1024 and 4096x4096, 3 runs each, metrics
gpu__time_duration.sum and dram__throughput.avg.pct_of_peak_sustained_elapsed,
--cache-control all --clock-control none.

1. raw: a hand-written NVTX script under a plain ncu command line (the baseline; run once
   unmeasured to warm the shared Triton cache, then before and after our routes, which
   shows its own spread), read back with ncu_report directly, not with our extraction;
2. kernel: the same work through `@nsight_core.nsight.api.kernel`, called twice: the first
   call (reported) warms what only this route loads, as raw's first run does for raw; the
   second is the one measured;
3. mcp: the same kernels as a ProfileRequest (with its correctness check) through
   `profile_candidates` over one MCP stdio session, ``--repeats`` times ``--think`` seconds
   apart, then `read_results`: the first request starts its processes cold, the later ones
   get the judge and contestant the server pre-started (nsight_core/standby/pool.py). Then
   ``--sessions`` - 1 more servers get one request each, every one between two more raw
   runs: the first requests' median is set against the raw runs' median, and each first
   request against the mean of the two raw runs around it (the hosts' speed drifts).
   Last, two more servers on the first session's store: each starts the pre-started pair
   for the setting that store remembers at its own start (standby.json), and its first
   request is timed at once and after ``--think`` seconds; and a server on a fresh store
   whose first request comes after ``--think`` seconds (its idle judge has started, no
   contestant can have: handover.py).

It prints, per (annotation, shape, metric), each route's AvgValue and its deviation from the
raw value, and each route's wall time divided by the raw run's (goals: kernel <= 1.2; a
server's first MCP request <= 0.8 and a later one with the same settings <= 0.4, issue 27). Ratios
are measured in this same command, never against a stored number.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
sys.path[:0] = [str(ROOT), str(EXAMPLES)]

METRICS = ["gpu__time_duration.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed"]
SHAPES = [(4096, 1024), (4096, 4096)]
RUNS = 3
NAMES = {
    "torch": "gpu_softmax_reference.py:torch_softmax",
    "triton": "gpu_softmax.py:triton_softmax",
}


def bench_request(
    shapes: Sequence[tuple[int, int]] = SHAPES,
    *,
    metrics: Sequence[str] | None = METRICS,
    runs: int = RUNS,
    backend: str = "ncu",
) -> dict[str, Any]:
    """The bench's request (torch's softmax, the reference, against the Triton one), as
    the other tools that measure its job send it too (tools/probe_softmax_agreement.py,
    tools/profile_judge.py); ``metrics`` None leaves the backend's default."""
    request: dict[str, Any] = {
        "reference": NAMES["torch"],
        "candidates": [NAMES["triton"]],
        "inputs": "gpu_softmax_reference.py:make_inputs",
        "workdir": str(EXAMPLES),
        "configs": [{"rows": r, "cols": c} for r, c in shapes],
        "runs": runs,
        "backend": backend,
    }
    if metrics is not None:
        request["metrics"] = list(metrics)
    return request


RAW_SCRIPT = """
import sys, nvtx, torch
sys.path.insert(0, {examples!r})
import gpu_softmax as k
fns = {{"torch": k.torch_softmax, "triton": k.triton_softmax}}
for c, (rows, cols) in enumerate({shapes!r}):
    for f in fns.values():  # warm-up outside the ranges
        f(k.make_inputs(rows, cols)[0]); torch.cuda.synchronize()
    for r in range({runs}):
        for name, f in fns.items():
            (x,) = k.make_inputs(rows, cols); torch.cuda.synchronize()
            rid = nvtx.start_range(message=f"c{{c}}:r{{r}}:{{name}}", domain="nspy")
            f(x); torch.cuda.synchronize()
            nvtx.end_range(rid)
"""


def run_raw(work: Path, tag: str) -> tuple[float, dict[tuple[str, int, str], float]]:
    script = work / "raw_softmax.py"
    script.write_text(RAW_SCRIPT.format(examples=str(EXAMPLES), shapes=SHAPES, runs=RUNS))
    report = work / f"raw-{tag}.ncu-rep"
    cmd = [
        os.environ.get("NSPY_NCU", "ncu"), "--nvtx", "--nvtx-include", "regex:nspy@.+",
        "--metrics", ",".join(METRICS), "--cache-control", "all", "--clock-control", "none",
        "--target-processes", "all", "-f", "-o", str(report), sys.executable, str(script),
    ]  # fmt: skip
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    wall = time.monotonic() - t0
    import ncu_report

    samples: dict[tuple[str, int, str], list[float]] = {}
    ctx = ncu_report.load_report(str(report))
    for rng in ctx:
        for i in range(len(rng)):
            action = rng[i]
            state = action.nvtx_state()
            name = next(
                state.domain_by_id(d).start_end_range(0).name()
                for d in state.domains()
                if state.domain_by_id(d).name() == "nspy"
            )
            config, _run, ann = name.split(":", 2)
            for m in METRICS:
                key = (NAMES[ann], int(config[1:]), m)
                samples.setdefault(key, []).append(float(action.metric_by_name(m).value()))
    return wall, {k: statistics.fmean(v) for k, v in samples.items()}


def run_kernel_api() -> tuple[float, dict[tuple[str, int, str], float]]:
    import torch

    from nsight_core.annotation import annotate
    from nsight_core.nsight.api import kernel

    @kernel(configs=SHAPES, runs=RUNS, metrics=METRICS)
    def softmax(rows: int, cols: int) -> None:
        sys.path.insert(0, str(EXAMPLES))  # runs in the worker: make the kernels importable
        import gpu_softmax as k

        x = k.make_inputs(rows, cols)[0]
        with annotate(NAMES["torch"]):
            k.torch_softmax(x)
        x = k.make_inputs(rows, cols)[0]
        torch.cuda.synchronize()
        with annotate(NAMES["triton"]):
            k.triton_softmax(x)

    t0 = time.monotonic()
    results = softmax()
    wall = time.monotonic() - t0
    return wall, {
        (r.Annotation, r.ConfigId, r.Metric): r.AvgValue or float("nan") for r in results.rows
    }


async def _mcp(
    store: str, repeats: int, think_s: float, first_delay_s: float = 0.0
) -> tuple[list[float], dict[tuple[str, int, str], float], str, float]:
    """``repeats`` identical requests in one MCP session, ``think_s`` apart (an agent reads
    each answer): the first starts its processes cold, the later ones are handed to the
    judge and contestant the server pre-started after the one before (standby.py). On a
    store an earlier server used, the first is handed to the pair this server started at
    its own start; ``first_delay_s`` is the pause before it (an agent's first thought)."""
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nspy_mcp", "serve", "--store", store],
        env=dict(os.environ),
    )
    request = {**bench_request(), "wait_s": 600}
    walls: list[float] = []
    async with Client(params) as client:
        for i in range(repeats):
            if i or first_delay_s:
                await anyio.sleep(think_s if i else first_delay_s)
            t0 = time.monotonic()
            answer = await client.call_tool("profile_candidates", {"request": request})
            walls.append(time.monotonic() - t0)
            if answer.is_error or answer.structured_content is None:
                raise RuntimeError(str(answer.content))
            prov = answer.structured_content.get("provenance") or {}
            phases = prov.get("phase_seconds") or {}
            judge_s = float(phases.get("judge", float("nan")))
            job_s = float(prov.get("wall_seconds") or float("nan"))
            waited_s = float(prov.get("waited_seconds") or 0.0)
            # The rest of the request: planning, reading the report, the rows, the protocol.
            rest_s = walls[-1] - job_s - waited_s
            sys.stderr.write(
                f"request {i + 1} ({_start_kind(phases)}): "
                f"{walls[-1]:.2f} s = waited {waited_s:.2f} s {json.dumps(prov.get('waits'))} "
                f"+ job {job_s:.2f} s + the rest {rest_s:.2f} s; judge (inputs, reference, "
                f"output checks of every call): {judge_s:.3f} s = "
                f"{100 * judge_s / job_s:.1f} % of the job (goal <= 10 %)\n"
                f"the job's phases (s): {json.dumps(phases)}\n"
            )
        result_id = answer.structured_content["result_id"]
        tools = {t.name: t for t in (await client.list_tools()).tools}
        schema = tools["profile_candidates"].output_schema
        read = await client.call_tool("read_results", {"result_id": result_id})
        if read.is_error or read.structured_content is None:
            raise RuntimeError(str(read.content))
    doc = json.dumps(read.structured_content)
    rows = answer.structured_content["rows"]
    values = {(r["Annotation"], r["ConfigId"], r["Metric"]): r["AvgValue"] for r in rows}
    return walls, values, doc, client_schema_check_s(schema)


def _start_kind(phases: dict[str, float]) -> str:
    if "standby_idle" in phases:
        return "pre-started"
    if "judge.start_left" in phases:  # the judge started before the request, its contestant not
        return f"idle judge, its start {phases['judge.start_left']:.2f} s short"
    return "cold"


def client_schema_check_s(schema: dict[str, object] | None) -> float:
    """What the MCP Python SDK's client does once per tool, at its first call: import
    jsonschema and check the tool's output schema against its dialect (cold, as in a fresh
    client process). The first request's wall time includes it; it is not the server's."""
    if not schema:
        return 0.0
    code = (
        "import json, sys, time\n"
        "s = json.loads(sys.stdin.read())\n"
        "t = time.monotonic()\n"
        "import jsonschema.validators, referencing\n"
        "jsonschema.validators.validator_for(s).check_schema(s)\n"
        "print(time.monotonic() - t)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], input=json.dumps(schema), capture_output=True,
        text=True, check=True, timeout=120,
    )  # fmt: skip
    return float(out.stdout.strip())


def startup_costs() -> str:
    """Fixed costs every route pays, to read the wall times against: a Python that imports
    torch and touches the GPU, bare and under ncu (nothing profiled), and our harness imports."""
    ncu = os.environ.get("NSPY_NCU", "ncu")
    touch = "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"
    cases = {
        "python+torch+cuda": [sys.executable, "-c", touch],
        "ncu python+torch+cuda": [
            ncu, "--nvtx", "--nvtx-include", "regex:nspy@.+", "--target-processes", "all",
            sys.executable, "-c", touch,
        ],
        "import nsight_core.contestant.core": [
            sys.executable, "-P", "-c", "import nsight_core.contestant.core",
        ],
        "import nsight_core.judge.entry": [
            sys.executable, "-P", "-c", "import nsight_core.judge.entry",
        ],
    }  # fmt: skip
    out = []
    for name, cmd in cases.items():
        t0 = time.monotonic()
        subprocess.run(cmd, check=True, capture_output=True, timeout=120, cwd=ROOT)
        out.append(f"{name}: {time.monotonic() - t0:.2f} s")
    compiled = any((ROOT / "nsight_core" / "contestant" / "__pycache__").glob("core.*.pyc"))
    if not compiled and sys.flags.dont_write_bytecode:
        out.append(
            "NOTE: no bytecode for this checkout and PYTHONDONTWRITEBYTECODE is set, so every "
            "job process compiles it from source (run python -m compileall nsight_core "
            "nspy_mcp first, as tools/gpu_check.sh does)"
        )
    return "fixed costs: " + "; ".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", type=Path, default=None, help="write the numbers here")
    p.add_argument("--repeats", type=int, default=3, help="MCP requests in one session")
    p.add_argument(
        "--think", type=float, default=10.0, help="seconds between MCP requests (an agent reading)"
    )
    p.add_argument(
        "--sessions",
        type=int,
        default=5,
        help="servers whose first (cold) request is timed, each between two raw runs (the "
        "hosts' speed drifts: on the H200, raw runs of one call took 5.5-8.3 s)",
    )
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="nspy-bench-") as tmp:
        work = Path(tmp)
        # Every route compiles the Triton kernel through one cache, warmed by a first raw
        # run that is not measured: the comparison is of profiling, not of JIT caches.
        os.environ.setdefault("TRITON_CACHE_DIR", str(work / "triton-cache"))
        run_raw(work, "warm")
        raw1, raw_values = run_raw(work, "1")
        raws = [raw1]
        # Twice: the raw route's first run is an unmeasured warm-up, and this route's first
        # call in a process also pays for what only it loads; the second is set against
        # the raw runs, the first reported beside it.
        kernel_first, _ = run_kernel_api()
        kernel_wall, kernel_values = run_kernel_api()
        mcp_walls, mcp_values, read_doc, schema_s = anyio.run(
            _mcp, str(work / "store"), max(1, args.repeats), args.think
        )
        # More first requests, each of a new server between two raw runs: a host's speed
        # drifts by tens of percent within a minute, so one cold sample says little.
        firsts = [mcp_walls[0]]
        for session in range(1, max(1, args.sessions)):
            raws.append(run_raw(work, str(len(raws) + 1))[0])
            firsts.append(anyio.run(_mcp, str(work / f"store{session}"), 1, 0.0)[0][0])
        # A restarted server on the first session's store: it starts the standby for the
        # settings that store remembers at its own start (standby.json). Its first request
        # right after the MCP handshake, and again after an agent's pause.
        restarted = [
            anyio.run(_mcp, str(work / "store"), 1, 0.0, delay)[0][0] for delay in (0.0, args.think)
        ]
        # A fresh server whose first request comes after an agent's pause: its idle judge
        # (handover.py) has started meanwhile, its contestant cannot have.
        paused = anyio.run(_mcp, str(work / "store-paused"), 1, 0.0, args.think)[0][0]
        raw2, raw2_values = run_raw(work, str(len(raws) + 1))
        raws.append(raw2)
        sys.stderr.write(startup_costs() + "\n")
    raw = statistics.median(raws)
    mcp_wall = statistics.median(firsts)
    per_session = [f / ((raws[i] + raws[i + 1]) / 2) for i, f in enumerate(firsts)]
    warm = statistics.median(mcp_walls[1:]) if len(mcp_walls) > 1 else float("nan")
    lines = [
        f"{'annotation':30} {'shape':10} {'metric':52} {'raw':>10} {'raw2%':>6} "
        f"{'kernel':>10} {'dev%':>6} {'mcp':>10} {'dev%':>6}"
    ]
    worst, floor = 0.0, 0.0
    for (ann, cid, metric), base in sorted(raw_values.items()):
        k = kernel_values.get((ann, cid, metric), float("nan"))
        m = mcp_values.get((ann, cid, metric), float("nan"))
        r2 = 100 * (raw2_values[(ann, cid, metric)] - base) / base
        dk, dm = 100 * (k - base) / base, 100 * (m - base) / base
        worst, floor = max(worst, abs(dk), abs(dm)), max(floor, abs(r2))
        shape = "x".join(map(str, SHAPES[cid]))
        lines.append(
            f"{ann:30} {shape:10} {metric:52} {base:10.4g} {r2:6.2f} "
            f"{k:10.4g} {dk:6.2f} {m:10.4g} {dm:6.2f}"
        )
    lines.append(
        f"largest AvgValue deviation from raw ncu: {worst:.2f} % (goal 2 %); "
        f"the last raw run vs the first (raw2%), the noise floor: up to {floor:.2f} %"
    )
    lines.append(
        f"wall: raw {' / '.join(f'{w:.2f}' for w in raws)} s (baseline, their median: "
        f"{raw:.2f} s); @kernel {kernel_wall:.2f} s = {kernel_wall / raw:.3f}x (goal <= 1.2; "
        f"the process's first call, like raw's unmeasured warm-up run: {kernel_first:.2f} s); "
        f"MCP profile_candidates, first request of a server (cold; {len(firsts)} servers: "
        f"{' / '.join(f'{w:.2f}' for w in firsts)} s, each over the mean of the raw runs "
        f"around it {' / '.join(f'{r:.3f}x' for r in per_session)}) median {mcp_wall:.2f} s = "
        f"{mcp_wall / raw:.3f}x (goal <= 0.8; of which the MCP client's one-time jsonschema "
        f"import and check of the tool's output schema, timed cold in a fresh process: "
        f"{schema_s:.2f} s; without it {(mcp_wall - schema_s) / raw:.3f}x); later requests "
        f"(pre-started, median of {len(mcp_walls) - 1}, {args.think:g} s apart) {warm:.2f} s = "
        f"{warm / raw:.3f}x (goal <= 0.4); first request of a restarted server on the "
        f"first store (its remembered setting pre-started at its start): at once "
        f"{restarted[0]:.2f} s = {restarted[0] / raw:.3f}x, after {args.think:g} s "
        f"{restarted[1]:.2f} s = {restarted[1] / raw:.3f}x; first request of a fresh server "
        f"after {args.think:g} s (its idle judge up, no contestant): {paused:.2f} s = "
        f"{paused / raw:.3f}x"
    )
    sys.stdout.write("\n".join(lines) + "\n")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "raw_wall_s": raws,
                    "mcp_first_request_wall_s": firsts,
                    "kernel_wall_s": kernel_wall,
                    "kernel_first_call_wall_s": kernel_first,
                    "mcp_wall_s": mcp_walls,
                    "mcp_restarted_first_request_wall_s": restarted,
                    "mcp_paused_first_request_wall_s": paused,
                    "raw": {str(k): v for k, v in raw_values.items()},
                    "raw2": {str(k): v for k, v in raw2_values.items()},
                    "kernel": {str(k): v for k, v in kernel_values.items()},
                    "mcp": {str(k): v for k, v in mcp_values.items()},
                    "read_results": json.loads(read_doc),
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
