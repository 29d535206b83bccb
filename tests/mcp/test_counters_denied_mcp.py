"""Where GPU performance counters are denied, a request naming ncu is answered by a backend
that reads none, and every number says so (docs/backends.md#counters-denied); through the
real MCP client, with a real job (events backend, CPU torch).

No GPU is here, so the server is given the report of an H100 host whose driver keeps
counters for administrators (`EngineConfig.environment`, made by the backends' own rules in
tests/host_reports.py): `check_environment`, the request's resolution and the preflights all
see that host, and the job itself runs for real on this one.
"""

from __future__ import annotations

import dataclasses
import json
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from nsight_core.host.counters import COUNTERS_DENIED, COUNTERS_FIX
from nsight_core.host.probe import probe_environment
from nsight_core.host.report import CounterAccess
from nsight_core.plan.config import EngineConfig
from nsight_core.request import DEFAULT_METRIC
from nspy_mcp.server import build_server
from tests.host_reports import ALLOWED, DENIED, gpu_host_report
from tests.mcp.test_server import structured

pytestmark = [pytest.mark.anyio]

pytest.importorskip("torch")

DRAM = "dram__bytes_read.sum"
REFERENCE = """
import torch


def make_inputs(rows, cols):
    return (torch.randn(rows, cols),)


def softmax(x):
    return torch.softmax(x, dim=1)
"""
CANDIDATE = """
import torch


def softmax(x):
    e = (x - x.amax(dim=1, keepdim=True)).exp()
    return e / e.sum(dim=1, keepdim=True)
"""


def _server_config(counters: CounterAccess, *, ncu: bool = True) -> EngineConfig:
    here = probe_environment(EngineConfig.from_env())
    report = gpu_host_report(here, counters, ncu=ncu)
    return dataclasses.replace(EngineConfig.from_env(), environment=report)


def _request(work: Path) -> dict[str, Any]:
    for name, code in (("ref.py", REFERENCE), ("cand.py", CANDIDATE)):
        (work / name).write_text(textwrap.dedent(code).lstrip())
    return {
        "reference": "ref.py:softmax",
        "candidates": ["cand.py:softmax"],
        "inputs": "ref.py:make_inputs",
        "workdir": str(work),
        "configs": [{"rows": 8, "cols": 16}],
        "backend": "ncu",
        "metrics": [DEFAULT_METRIC, DRAM],
        "runs": 3,
        "diagnose": True,  # its bound reads counters too: each diagnosis says why it has none
    }


async def test_counters_denied_ncu_is_answered_by_events_and_every_number_says_so(
    tmp_path: Path,
) -> None:
    config = _server_config(DENIED)
    async with Client(build_server(tmp_path / "store", config=config)) as client:
        with anyio.fail_after(240):
            env = structured(await client.call_tool("check_environment", {}))
            first = structured(
                await client.call_tool("profile_candidates", {"request": _request(tmp_path)})
            )
            result_id = first["result_id"]
            read = await client.call_tool("read_results", {"result_id": result_id, "wait_s": 200})
            manifest = await client.read_resource(f"nspy://results/{result_id}/manifest")
    ran = json.loads(getattr(manifest.contents[0], "text", "{}"))["request"]
    result = structured(read)["result"]

    # check_environment names the cause and the cheapest fix, in the words the rows repeat.
    ncu = next(b for b in env["backends"] if b["name"] == "ncu")
    assert not ncu["available"] and ncu["reason"] == COUNTERS_DENIED
    assert any(COUNTERS_FIX in fix for fix in env["remediation"])

    assert result["status"] == "done", result["message"]
    assert ran["backend"] == "events" and ran["metrics"] == [DEFAULT_METRIC]
    assert ran["fallback"]["backend"] == "ncu"
    assert ran["fallback"]["metrics"] == [DEFAULT_METRIC, DRAM]
    assert result["provenance"]["backend"] == "events"
    said = "ncu was asked for, but " + COUNTERS_DENIED
    assert result["message"].startswith(said) and "events answered instead" in result["message"]
    assert result["provenance"]["notes"][0].startswith(said)
    assert {(d["Annotation"], d["Bound"]) for d in result["diagnoses"]} == {
        ("ref.py:softmax", None),
        ("cand.py:softmax", None),
    }
    assert all(any("reads no counters" in w for w in d["Why"]) for d in result["diagnoses"])

    rows = result["rows"]
    timed = [r for r in rows if r["Metric"] == "events__time_duration"]
    dram = [r for r in rows if r["Metric"] == DRAM]
    groups = {("ref.py:softmax", 0), ("cand.py:softmax", 0)}
    assert {(r["Annotation"], r["ConfigId"]) for r in timed} == groups
    assert {(r["Annotation"], r["ConfigId"]) for r in dram} == groups
    assert len(rows) == len(timed) + len(dram)  # no row of ncu's time, nor any other
    for r in timed:
        assert r["Backend"] == "events" and r["Evidence"] == "in_process"
        assert r["AvgValue"] is not None and r["NumRuns"] == 3
        note = next(x for x in r["Reasons"] if x.startswith(said))
        assert "events__time_duration" in note and "not comparable" in note
        assert DEFAULT_METRIC in note
    for r in dram:
        assert r["AvgValue"] is None and r["MedianValue"] is None
        assert (r["NumRuns"], r["RequestedRuns"], r["Trust"]) == (0, 3, "failed")
        assert r["ErrorClass"] == "permission_denied"
        assert COUNTERS_DENIED in r["Error"] and COUNTERS_FIX in r["Error"]
    (comparison,) = result["comparisons"]
    assert comparison["Metric"] == "events__time_duration" and comparison["Speedup"] is not None
    assert any(x.startswith(said) for x in comparison["Reasons"])


async def test_ncu_missing_where_counters_are_allowed_is_refused_as_before(
    tmp_path: Path,
) -> None:
    """Installing ncu is the caller's fix: the request that named ncu is refused with it,
    nothing is queued, and no other backend answers in its place."""
    (tmp_path / "bin").mkdir()
    config = dataclasses.replace(
        _server_config(ALLOWED, ncu=False), ncu="", path=str(tmp_path / "bin")
    )
    async with Client(build_server(tmp_path / "store", config=config)) as client:
        with anyio.fail_after(60):
            answer = await client.call_tool("profile_candidates", {"request": _request(tmp_path)})
            listing = structured(await client.call_tool("read_results", {}))
    assert answer.is_error
    first = answer.content[0]
    assert first.type == "text" and first.text.startswith("profiler_error")
    assert "no ncu on PATH" in first.text and "install Nsight Compute" in first.text
    assert listing["results"] == []


async def test_a_caller_cannot_set_the_fallback_record(tmp_path: Path) -> None:
    """The record labels every number of the answer: set by a caller beside another
    backend, it would say ncu was asked for where it was not. Refused; nothing queued."""
    request = {
        **_request(tmp_path),
        "backend": "events",
        "metrics": [DEFAULT_METRIC],
        "fallback": {"backend": "ncu", "metrics": [DRAM], "reason": "x", "fix": "y"},
    }
    async with Client(build_server(tmp_path / "store")) as client:
        with anyio.fail_after(60):
            answer = await client.call_tool("profile_candidates", {"request": request})
            listing = structured(await client.call_tool("read_results", {}))
    assert answer.is_error
    first = answer.content[0]
    assert first.type == "text" and first.text.startswith("invalid_request")
    assert "drop `fallback`" in first.text
    assert listing["results"] == []
