"""Staged evaluation through the real MCP client (in memory), with real worker processes.

The server's profile stage runs under events here (`EngineConfig.profile_backend`), since this host
has no ncu; everything else (queue, snapshot, store) is the real path.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.types import CallToolResult

from nsight_core.collectors import Backend, get_backend
from nsight_core.plan.config import EngineConfig
from nsight_core.settings import JobSettings
from nspy_mcp.server import build_server

pytestmark = pytest.mark.anyio

REFERENCE = """
import time

def make(n):
    return (n,)

def ref(n):
    time.sleep(0.010)
    return n * 2
"""
REF = "reference.py:ref"

SOURCE = """
import time

def fast(n):
    time.sleep(0.001)
    return n * 2

def slow(n):
    time.sleep(0.020)
    return n * 2

def wrong(n):
    return n + 1
"""


def staged(workdir: Path, **overrides: Any) -> dict[str, Any]:
    """A staged request; the reference and the input maker live in a file of their own."""
    (workdir / "reference.py").write_text(REFERENCE)
    request: dict[str, Any] = {
        "reference": REF,
        "candidates": ["slow", "wrong", "fast"],
        "inputs": "reference.py:make",
        "source": SOURCE,
        "workdir": str(workdir),
        "configs": [{"n": 3}],
        "runs": 3,
        "check": {"seeds": 1, "check_determinism": False},
        "stages": {"screen": "events", "top_k": 1},
    }
    request.update(overrides)
    return request


def structured(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return dict(result.structured_content)


def error_text(result: CallToolResult) -> str:
    assert result.is_error
    first = result.content[0]
    assert first.type == "text"
    return first.text


@pytest.mark.slow  # a staged job (two stages) through the server, read while it runs
async def test_read_results_shows_the_screen_rows_and_an_eta_while_the_profile_stage_runs(
    tmp_path: Path,
) -> None:
    config = dataclasses.replace(EngineConfig.from_env(), profile_backend="events")
    server = build_server(tmp_path / "store", config=config)
    async with Client(server) as client:
        first = structured(
            await client.call_tool("profile_candidates", {"request": staged(tmp_path, wait_s=0)})
        )
        result_id = first["result_id"]
        assert first["status"] in {"queued", "running"}
        seen: dict[str, Any] | None = None
        with anyio.fail_after(120):
            while seen is None:
                answer = structured(
                    await client.call_tool("read_results", {"result_id": result_id})
                )
                result = answer["result"]
                assert result["status"] != "done", "the profile stage was never seen running"
                stages = result["stages"]
                if stages and stages[1]["Status"] == "running":
                    seen = answer
                await anyio.sleep(0.05)
        final = structured(
            await client.call_tool("read_results", {"result_id": result_id, "wait_s": 120})
        )["result"]

    partial = seen["result"]
    screen, profile = partial["stages"]
    assert screen["Status"] == "done"
    assert [r["Annotation"] for r in screen["Ranking"] if r["Kept"]] == ["fast"]
    assert profile["Annotations"] == [REF, "fast"]
    assert profile["EtaS"] is not None and profile["EtaS"] >= 0
    assert {r["Stage"] for r in partial["rows"]} == {"screen"}
    assert {r["Annotation"] for r in partial["rows"]} == {REF, "slow", "fast"}
    assert "stage 2/2 profile (events)" in partial["message"]
    assert "rows of the finished stage(s) ['screen'] are below" in partial["message"]
    assert "s left" in partial["message"]

    assert final["status"] == "done", final["message"]
    assert [s["Status"] for s in final["stages"]] == ["done", "done"]
    assert {r["Annotation"] for r in final["rows"] if r["Stage"] == "profile"} == {REF, "fast"}
    assert "kept the top 1 ['fast']" in final["message"]


async def test_staged_requests_that_cannot_work_are_refused_before_anything_is_queued(
    tmp_path: Path,
) -> None:
    async with Client(build_server(tmp_path / "store")) as client:
        events_only = error_text(
            await client.call_tool(
                "profile_candidates", {"request": staged(tmp_path, backend="events")}
            )
        )
        budget_alone = error_text(
            await client.call_tool(
                "profile_candidates", {"request": staged(tmp_path, stages=None, budget_s=10.0)}
            )
        )
        listing = structured(await client.call_tool("read_results", {}))
    assert "invalid_request" in events_only and "set backend to 'ncu'" in events_only
    assert "budget_s applies to staged evaluation only" in budget_alone
    assert listing["total"] == 0


@pytest.mark.parametrize("staging", [True, False])
async def test_a_request_is_checked_once_when_it_is_queued_and_not_again_when_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, staging: bool
) -> None:
    # Every preflight goes through a backend's `preflight`: count the calls, by backend.
    events = type(get_backend("events"))
    seen: list[str] = []
    checked = events.preflight

    def counted(self: Backend, settings: JobSettings, config: EngineConfig) -> None:
        seen.append(self.name)
        checked(self, settings, config)

    monkeypatch.setattr(events, "preflight", counted)
    config = dataclasses.replace(EngineConfig.from_env(), profile_backend="events")
    request = staged(tmp_path, wait_s=60)
    if not staging:
        request.update(stages=None, backend="events")
    async with Client(build_server(tmp_path / "store", config=config)) as client:
        with anyio.fail_after(120):
            result = structured(await client.call_tool("profile_candidates", {"request": request}))
    assert result["status"] == "done", result["message"]
    # Staged: the profile stage's request and the screen's, each once; unstaged: the one job.
    assert seen == (["events", "events"] if staging else ["events"])
