"""03: drive the server from a script through the MCP Python client, over stdio.

This is how any MCP client talks to nspy-mcp: start `python -m nspy_mcp serve` as a
subprocess, then call tools. The loop is the one an agent follows: check the environment,
validate metrics, profile, read the stored result back (here in full detail, with raw
per-run values). Progress notifications arrive while profile_candidates waits.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

from nspy_mcp import demo_kernels as k


def answer(result: CallToolResult) -> dict[str, Any]:
    """The structured answer of a tool call; a tool error says what to change."""
    if result.is_error or result.structured_content is None:
        raise RuntimeError(" ".join(getattr(c, "text", "") for c in result.content))
    return dict(result.structured_content)


async def on_progress(progress: float, total: float | None, message: str | None) -> None:
    print(f"  {progress:5.1f}/{total} {message}", file=sys.stderr)


async def profile_over_stdio(store: str) -> dict[str, Any]:
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nspy_mcp", "serve", "--store", store],
        env=dict(os.environ),  # the SDK's default passes only HOME, PATH, USER and a few more
    )
    async with Client(server) as client:
        env = answer(await client.call_tool("check_environment", {}))
        usable = [b["name"] for b in env["backends"] if b["available"]]
        print(f"backends here: {usable}")

        metrics = answer(
            await client.call_tool("validate_metrics", {"metrics": ["gpu__time_duration.sum"]})
        )
        print(f"metric check: {[(m['name'], m['status']) for m in metrics['metrics']]}")

        request = {
            "reference": k.REFERENCE,
            "candidates": [k.VECTORIZED, k.WRONG_AXIS],
            "inputs": k.INPUTS,
            "workdir": str(k.DIRECTORY),
            "configs": [{"rows": 64, "cols": 64}],
            "backend": "events",
            "runs": 3,
        }
        first = answer(
            await client.call_tool(
                "profile_candidates", {"request": request}, progress_callback=on_progress
            )
        )
        print(first["message"])

        # Long jobs answer status 'running'; wait_s waits for them here.
        read = answer(
            await client.call_tool(
                "read_results",
                {"result_id": first["result_id"], "detail": "full", "wait_s": 300},
            )
        )
        return dict(read["result"])


def main() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as store:
        result = anyio.run(profile_over_stdio, store)
    for comp in result["comparisons"]:
        print(
            f"{comp['Annotation']}: speedup {comp['Speedup']:.3g}x resolvable={comp['Resolvable']}"
        )
    assert result["status"] == "done", result["message"]
    assert any(r["RawValues"] for r in result["rows"]), "detail='full' has raw per-run values"
    failed = [c["Annotation"] for c in result["correctness"] if not c["Passed"]]
    assert failed == [k.WRONG_AXIS]
    return result


if __name__ == "__main__":
    main()
