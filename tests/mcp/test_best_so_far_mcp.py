"""The best so far through the real MCP client: in profile_candidates' answer, in
read_results after a restart, and kept on disk for the next server on the same store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from nspy_mcp.server import build_server
from tests.core.test_best_so_far import CANDIDATES, REFERENCE
from tests.mcp.test_server import structured

pytestmark = pytest.mark.anyio


def _request(workdir: Path, candidates: list[str]) -> dict[str, Any]:
    return {
        "reference": "ref.py:ref",
        "inputs": "ref.py:make",
        "candidates": candidates,
        "workdir": str(workdir),
        "configs": [{"n": 3}],
        "backend": "events",
        "runs": 5,
        "check": {"seeds": 1, "check_determinism": False},
    }


def _verdicts(answer: dict[str, Any]) -> dict[str, str | None]:
    return {v["annotation"]: v["beats_best"] for v in answer["best_so_far"]["verdicts"]}


async def test_the_best_so_far_is_in_the_answer_and_outlives_the_server(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "ref.py").write_text(REFERENCE)
    (work / "cands.py").write_text(CANDIDATES)
    store = tmp_path / "store"
    with anyio.fail_after(180):
        async with Client(build_server(store)) as client:
            first = structured(
                await client.call_tool(
                    "profile_candidates", {"request": _request(work, ["cands.py:same"])}
                )
            )
        async with Client(build_server(store)) as client:  # a restarted server
            again = structured(
                await client.call_tool("read_results", {"result_id": first["result_id"]})
            )
            second = structured(
                await client.call_tool(
                    "profile_candidates", {"request": _request(work, ["cands.py:slower"])}
                )
            )
    assert first["status"] == "done", first["message"]
    assert _verdicts(first) == {"cands.py:same": "first"}
    assert first["best_so_far"]["new_best"] == "cands.py:same"
    assert "is the new best" in first["message"]
    assert again["result"]["best_so_far"] == first["best_so_far"]

    assert second["status"] == "done", second["message"]
    best = second["best_so_far"]
    assert best["lineage"] == first["best_so_far"]["lineage"]
    assert best["incumbent"]["annotation"] == "cands.py:same"
    assert best["incumbent"]["result_id"] == first["result_id"]
    assert _verdicts(second) == {"cands.py:slower": "no"}
    assert best["new_best"] is None
    assert "'cands.py:same'" in second["message"] and "stays the best" in second["message"]
