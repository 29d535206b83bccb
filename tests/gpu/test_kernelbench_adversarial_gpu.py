"""KernelBench's own adversarial kernels through `profile_candidates`, on every backend
(issue 43, class 7).

KernelBench keeps three `load_inline` CUDA candidates against its level-1 problem 1
(square matmul, N=4096) that an evaluator must not pass: one returns ``torch::empty``
(whatever the caching allocator hands back, possibly a reference's freed output), one
zeroes its inputs and returns zeros, and one runs cuBLAS on a stream of its own that is
never joined. Their files are KernelBench's, not ours: set ``KERNELBENCH_REPO`` to a
checkout (the folder holding ``KernelBench/level1`` and ``src/kernelbench/unit_tests``).
Each is built by `load_inline` inside the confined contestant (its extension cache is the
shared contestant one, docs/sandbox.md) and must end incorrect, suspicious, or, where the
backend times every kernel on every stream (ncu, cupti), with its true time: no
resolvable speedup above 1.5 over `torch.matmul`.

Run on a GPU host: ``KERNELBENCH_REPO=... python -m pytest -m gpu -s
tests/gpu/test_kernelbench_adversarial_gpu.py``; it prints the table the notes quote.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.types import CallToolResult

from nspy_mcp.server import build_server

pytestmark = [pytest.mark.gpu, pytest.mark.anyio]

PROBLEM = "1_Square_matrix_multiplication_"
KERNELS = ("result_reuse_kernel", "zero_out_kernel", "non_default_stream_kernel")
HONEST_ON_TIMED_STREAMS = {"non_default_stream_kernel"}
"""Its kernels run, on a stream of its own: ncu and cupti time them wherever they run."""


def _repo() -> Path:
    root = os.environ.get("KERNELBENCH_REPO")
    if not root:
        pytest.skip("KERNELBENCH_REPO is not set (a KernelBench checkout)")
    return Path(root)


def _structured(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return dict(result.structured_content)


@pytest.mark.parametrize("backend", ["events", "cupti", "ncu"])
async def test_kernelbench_adversarial_kernels_never_win(tmp_path: Path, backend: str) -> None:
    repo = _repo()
    work = tmp_path / "work"
    work.mkdir()
    shutil.copyfile(repo / "KernelBench" / "level1" / f"{PROBLEM}.py", work / f"{PROBLEM}.py")
    tests = repo / "src" / "kernelbench" / "unit_tests" / "test_kernels"
    for name in KERNELS:
        shutil.copyfile(tests / f"{name}.py", work / f"{name}.py")
    request = {
        "reference": f"{PROBLEM}.py:Model",
        "candidates": [f"{name}.py:ModelNew" for name in KERNELS],
        "workdir": str(work),
        "backend": backend,
        "runs": 5,
        "time_limit_s": 540.0,
        "wait_s": 0.0,
    }
    async with Client(build_server(tmp_path / "store")) as client:
        with anyio.fail_after(560):
            first = _structured(await client.call_tool("profile_candidates", {"request": request}))
            read = _structured(
                await client.call_tool(
                    "read_results", {"result_id": first["result_id"], "wait_s": 550}
                )
            )
    result = read["result"]
    assert result["status"] in ("done", "failed"), result["message"]
    print(f"\nKernelBench adversarial kernels, backend {backend}: {result['message'][:200]}")
    print(
        "| kernel | check | trust | speedup [95% CI] | resolvable | why |\n|---|---|---|---|---|---|"
    )
    for name in KERNELS:
        ann = f"{name}.py:ModelNew"
        checks = [c for c in result["correctness"] if c["Annotation"] == ann]
        rows = [r for r in result["rows"] if r["Annotation"] == ann]
        comps = [c for c in result["comparisons"] if c["Annotation"] == ann and c["Speedup"]]
        passed = bool(checks) and all(c["Passed"] for c in checks)
        trust = sorted({r["Trust"] for r in rows})
        why = "; ".join(
            [*(x for c in checks for x in c["Reasons"]), *(x for r in rows for x in r["Reasons"])]
        )
        speed = "-"
        if comps:
            c = comps[0]
            speed = (
                f"{c['Speedup']:.3f} [{c['Speedup_CI95_Lower']:.3f}, "
                f"{c['Speedup_CI95_Upper']:.3f}] {c['Resolvable']}"
            )
        print(f"| {name} | {'passed' if passed else 'failed'} | {trust} | {speed} | {why[:300]} |")
        if not passed:
            continue  # incorrect: never timed, nothing to win
        if "suspicious" in trust:
            continue
        assert name in HONEST_ON_TIMED_STREAMS and backend in ("ncu", "cupti"), (name, why)
        # Timed with every kernel it launched: no more than the real GEMM's speed.
        assert all(not (c["Resolvable"] and c["Speedup_CI95_Lower"] > 1.5) for c in comps)
