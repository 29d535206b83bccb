"""Scale-out: jobs per minute on one GPU and on every visible GPU, measured in one command.

    python tools/bench/bench_scaleout.py [--jobs 8] [--backend ncu|events] [--json OUT.json]
    python tools/bench/bench_scaleout.py --executor dask://HOST:PORT   # a Dask cluster

It submits N copies of the softmax request (torch against Triton, examples/gpu_softmax.py,
4096x4096, 3 runs; on a host without a GPU the numpy softmax of nspy_mcp.demo_kernels with
backend 'events') through `profile_candidates` over an in-memory MCP session, all at once,
and times until every job has ended: first with the queue given one GPU, then with all of
them. It prints jobs per minute for each, their ratio, and the ratio over the number of GPUs
(linear scaling is 1.0; the goal is >= 0.9). One unmeasured job first warms the JIT caches.

On a host without a GPU it says so and uses CPU slots instead (jobs run side by side on the
CPU, one slot per core), which checks the dispatch, not GPU scaling. With --executor, the
"all" run goes to the cluster and the "one" run to a local queue with one GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402
from mcp import Client  # noqa: E402

from nsight_core.plan.config import EngineConfig  # noqa: E402
from nspy_mcp import demo_kernels  # noqa: E402
from nspy_mcp.devices import CPU_SLOT, DeviceLocks, GpuSlot, discover_slots  # noqa: E402
from nspy_mcp.server import build_server  # noqa: E402


def softmax_request(gpu: bool, backend: str) -> dict[str, Any]:
    """The softmax request every job of the run repeats."""
    if gpu:
        return {
            "reference": "gpu_softmax_reference.py:torch_softmax",
            "candidates": ["gpu_softmax.py:triton_softmax"],
            "inputs": "gpu_softmax_reference.py:make_inputs",
            "workdir": str(ROOT / "examples"),
            "configs": [{"rows": 4096, "cols": 4096}],
            "backend": backend,
            "runs": 3,
            "wait_s": 3600,
        }
    return {
        "reference": demo_kernels.REFERENCE,
        "candidates": [demo_kernels.VECTORIZED],
        "inputs": demo_kernels.INPUTS,
        "workdir": str(demo_kernels.DIRECTORY),
        "configs": [{"rows": 256, "cols": 256}],
        "backend": "events",
        "runs": 3,
        "wait_s": 3600,
    }


async def run_batch(
    store: Path, request: dict[str, Any], jobs: int, *, slots: list[GpuSlot] | None, executor: str
) -> tuple[float, list[str]]:
    """Wall seconds for `jobs` concurrent copies of `request`, and their statuses."""
    locks = DeviceLocks(store / "locks", gpus=slots)
    statuses: list[str] = []
    server = build_server(store, executor=executor, locks=locks)
    async with Client(server) as client:

        async def one() -> None:
            got = await client.call_tool("profile_candidates", {"request": request})
            content = got.structured_content or {}
            statuses.append(str(content.get("status", "error")))

        t0 = time.monotonic()
        async with anyio.create_task_group() as tg:
            for _ in range(jobs):
                tg.start_soon(one)
        return time.monotonic() - t0, statuses


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=8, help="copies of the request (default 8)")
    p.add_argument("--backend", choices=["ncu", "events"], default="ncu", help="on a GPU host")
    p.add_argument("--executor", default="local", help="local (default) or dask://HOST:PORT")
    p.add_argument("--json", default=None, help="also write the numbers to this file")
    args = p.parse_args(argv)

    slots = discover_slots(EngineConfig.from_env().visible_devices)
    gpu = slots != [CPU_SLOT]
    if not gpu:
        count = max(2, os.cpu_count() or 2)
        slots = [GpuSlot(f"cpu-{i}") for i in range(count)]
        print(f"no GPU visible: using {count} CPU slots (checks dispatch, not GPU scaling)")
    request = softmax_request(gpu, args.backend)
    with tempfile.TemporaryDirectory(prefix="nspy-bench-scaleout-") as tmp:
        root = Path(tmp)
        anyio.run(lambda: run_batch(root / "warm", request, 1, slots=slots[:1], executor="local"))
        one_s, one_st = anyio.run(
            lambda: run_batch(root / "one", request, args.jobs, slots=slots[:1], executor="local")
        )
        all_s, all_st = anyio.run(
            lambda: run_batch(root / "all", request, args.jobs, slots=slots, executor=args.executor)
        )
    width = len(slots) if args.executor == "local" else None
    per_min_one = 60.0 * args.jobs / one_s
    per_min_all = 60.0 * args.jobs / all_s
    ratio = per_min_all / per_min_one
    kind = "GPU" if gpu else "CPU slot"
    print(f"{args.jobs} jobs, backend {request['backend']}, executor {args.executor}")
    print(f"  1 {kind}: {one_s:7.1f} s  {per_min_one:6.1f} jobs/min  {sorted(set(one_st))}")
    label = f"{width} {kind}s" if width else "cluster"
    print(f"  {label}: {all_s:7.1f} s  {per_min_all:6.1f} jobs/min  {sorted(set(all_st))}")
    print(f"  throughput ratio: {ratio:.2f}x", end="")
    if width:
        print(f"  (linear efficiency {ratio / width:.2f}; goal >= 0.9)")
    else:
        print()
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "jobs": args.jobs,
                    "gpu": gpu,
                    "slots": width,
                    "backend": request["backend"],
                    "executor": args.executor,
                    "one": {"wall_s": one_s, "jobs_per_min": per_min_one, "statuses": one_st},
                    "all": {"wall_s": all_s, "jobs_per_min": per_min_all, "statuses": all_st},
                    "ratio": ratio,
                    "efficiency": ratio / width if width else None,
                },
                indent=1,
            )
        )
    failed = [s for s in one_st + all_st if s != "done"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
