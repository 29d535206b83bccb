#!/usr/bin/env python3
"""Measure what `tools/list` costs an agent: the bytes of the answer on the wire, by part.

    python tools/bench/bench_tool_list.py [--python PYTHON]

Starts ``python -m nspy_mcp serve`` on a temporary store, speaks JSON-RPC over its stdio
(the 2025-11-25 handshake, then ``tools/list``) and prints the size of the result as sent,
then per tool the bytes of its description, input schema and output schema, and the bytes
of ``$defs`` that occur in more than one tool's schemas. Every client puts this answer in
the agent's context once per session, so it is a cost paid by every session.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 120

MESSAGES: list[dict[str, Any]] = [
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "bench_tool_list", "version": "1"},
        },
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
]


def compact_len(value: Any) -> int:
    """Bytes of `value` as compact JSON, the form the SDK writes on the wire."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def list_tools(python: str) -> tuple[int, dict[str, Any]]:
    """The `tools/list` line's length in bytes and its parsed result, from a real server."""
    with tempfile.TemporaryDirectory() as store, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [python, "-m", "nspy_mcp", "serve", "--store", store],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            cwd=ROOT,
            start_new_session=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        deadline = threading.Timer(TIMEOUT_S, proc.kill)  # a hung server ends the read
        deadline.start()
        try:
            for message in MESSAGES:
                proc.stdin.write((json.dumps(message) + "\n").encode())
            proc.stdin.flush()
            while line := proc.stdout.readline():  # the server answers in order; id 2 is last
                message = json.loads(line)
                if message.get("id") == 2:
                    return len(line.rstrip(b"\n")), message["result"]
        finally:
            deadline.cancel()
            proc.kill()
            proc.wait(TIMEOUT_S)
        err.seek(0)
        tail = err.read().decode(errors="replace")[-2000:]
    raise SystemExit(f"the server ended without answering tools/list; its stderr:\n{tail}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs the server")
    args = ap.parse_args()
    line_bytes, result = list_tools(args.python)
    tools = result["tools"]
    print(f"tools/list: {line_bytes} bytes on the wire, result {compact_len(result)} bytes")
    print(f"{'tool':20s} {'description':>11s} {'input':>7s} {'output':>7s} {'$defs':>7s}")
    totals = Counter[str]()
    defs_seen = Counter[str]()
    defs_size: dict[str, int] = {}
    for tool in tools:
        out = tool.get("outputSchema") or {}
        defs = {**tool["inputSchema"].get("$defs", {}), **out.get("$defs", {})}
        sizes = {
            "description": len(tool.get("description", "").encode()),
            "input": compact_len(tool["inputSchema"]),
            "output": compact_len(out) if out else 0,
            "defs": sum(compact_len(v) for v in defs.values()),
        }
        totals.update(sizes)
        for name, value in defs.items():
            defs_seen[name] += 1
            defs_size[name] = compact_len(value)
        print(
            f"{tool['name']:20s} {sizes['description']:11d} {sizes['input']:7d} "
            f"{sizes['output']:7d} {sizes['defs']:7d}"
        )
    print(
        f"{'all':20s} {totals['description']:11d} {totals['input']:7d} "
        f"{totals['output']:7d} {totals['defs']:7d}"
    )
    repeated = {n: c for n, c in defs_seen.items() if c > 1}
    extra = sum(defs_size[n] * (c - 1) for n, c in repeated.items())
    print(f"$defs in more than one tool: {len(repeated)}, {extra} bytes repeated")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
