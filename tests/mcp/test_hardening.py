"""Issue 11, server side: every message answered, errors an agent can act on, plain outcomes,
cancel after 'running'. Through the real MCP client (in memory, both eras) and real stdio
subprocesses; jobs are real (events backend on CPU, worker subprocesses).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from nsight_core.request import MAX_CONFIG_DEPTH, MAX_CONFIGS_BYTES, ProfileRequest
from nspy_mcp import demo_kernels
from nspy_mcp.wire import top_level_scalars
from tests.mcp.test_server import (
    JOB_MODES,
    MODES,
    connected,
    error_text,
    softmax_request,
    structured,
)

pytestmark = pytest.mark.anyio


def nested(depth: int) -> dict[str, Any]:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return dict(value)


# -- error texts ----------------------------------------------------------------------------

BAD_CALLS: list[tuple[str, dict[str, Any], list[str]]] = [
    ("profile_candidates", {"request": softmax_request(candidates=[])}, ["request.candidates"]),
    ("profile_candidates", {"request": softmax_request(runs="5")}, ["request.runs", "quotes"]),
    ("profile_candidates", {"request": softmax_request(runs=0)}, ["request.runs", ">= 1"]),
    ("profile_candidates", {"request": softmax_request(backend="gpu")}, ["'events'"]),
    ("profile_candidates", {"request": softmax_request(check={"enabeld": True})}, ["'enabled'"]),
    ("profile_candidates", {"request": softmax_request(check={"enabled": "no"})}, ["true or"]),
    ("profile_candidates", {"request": softmax_request(workdir="kernels")}, ["absolute"]),
    ("profile_candidates", {"request": {"reference": "a.py:r"}}, ["request.candidates"]),
    ("check_environment", {"deep": "yes"}, ["deep", "true or false"]),
    ("read_results", {"limit": "5"}, ["limit", "integer"]),
    ("read_results", {"wait_s": "5", "result_id": "r20261201T120000123-0a1b2c3d"}, ["wait_s"]),
    ("read_results", {"result_id": "../../etc/passwd"}, ["is not a result id", "listing"]),
    ("read_results", {"cursor": "../x"}, ["cursor", "is not a result id"]),
    ("read_results", {"cancel": True}, ["cancel", "result_id"]),
    ("validate_metrics", {"metrics": []}, ["metrics", "at least 1"]),
    ("no_such_tool", {}, ["unknown tool"]),
]


@MODES
async def test_every_tool_error_starts_with_its_class_and_names_field_and_fix(
    mode: str, tmp_path: Path
) -> None:
    async with connected(tmp_path, mode) as client:
        for tool, args, needles in BAD_CALLS:
            text = error_text(await client.call_tool(tool, args))
            assert text.startswith("invalid_request: "), text
            assert "To fix" in text, text
            assert "pydantic" not in text and "validation error for" not in text, text
            assert "Error executing tool" not in text, text
            assert r"\d{8}" not in text, text  # no pattern regex
            for needle in needles:
                assert needle in text, (needle, text)
        listing = structured(await client.call_tool("read_results", {}))
    assert listing["total"] == 0  # nothing was queued


async def test_a_relative_workdir_says_it_must_be_absolute_and_names_the_cwd(
    tmp_path: Path,
) -> None:
    async with connected(tmp_path) as client:
        text = error_text(
            await client.call_tool(
                "profile_candidates", {"request": softmax_request(workdir="nspy_mcp")}
            )
        )
    assert "request.workdir" in text and "must be an absolute path" in text
    assert repr(os.getcwd()) in text


@MODES
async def test_configs_have_depth_and_size_limits_named_in_the_error(
    mode: str, tmp_path: Path
) -> None:
    async with connected(tmp_path, mode) as client:
        deep = error_text(
            await client.call_tool(
                "profile_candidates", {"request": softmax_request(configs=[nested(190)])}
            )
        )
        big = error_text(
            await client.call_tool(
                "profile_candidates",
                {
                    "request": softmax_request(
                        configs=[{"rows": 8, "blob": "x" * MAX_CONFIGS_BYTES}]
                    )
                },
            )
        )
    assert deep.startswith("invalid_request: request.configs")
    assert f"limit of {MAX_CONFIG_DEPTH}" in deep and "190 levels" in deep
    assert big.startswith("invalid_request: request.configs")
    assert f"limit of {MAX_CONFIGS_BYTES}" in big
    at_limit = ProfileRequest.model_validate(softmax_request(configs=[nested(MAX_CONFIG_DEPTH)]))
    assert len(at_limit.configs) == 1


async def test_tool_descriptions_are_dedented(tmp_path: Path) -> None:
    async with connected(tmp_path) as client:
        tools = (await client.list_tools()).tools
    for tool in tools:
        lines = (tool.description or "").splitlines()
        assert len(lines) > 3
        assert not any(line.startswith(" ") for line in lines), tool.name


# -- stdio: every line gets an answer ------------------------------------------------------------


def test_stdio_answers_lines_it_cannot_read(tmp_path: Path) -> None:
    """A non-JSON line gets -32700, JSON that is no message -32600, a request too deep for
    the SDK's parser an invalid_request tool error under its id; the server keeps serving."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "nspy_mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "NSPY_MCP_STORE": str(tmp_path)},
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None

    def send(message: object) -> None:
        assert proc.stdin is not None
        proc.stdin.write((message if isinstance(message, str) else json.dumps(message)) + "\n")
        proc.stdin.flush()

    def answer() -> dict[str, Any]:
        assert proc.stdout is not None
        return dict(json.loads(proc.stdout.readline()))

    deep_call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {
            "name": "profile_candidates",
            "arguments": {"request": softmax_request(configs=[nested(400)])},
        },
    }
    try:
        send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "test", "version": "0"},
                },
            }
        )
        assert answer()["id"] == 1
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send("this is not JSON")
        not_json = answer()
        send({"id": 5, "hello": "world"})
        not_rpc = answer()
        send(deep_call)
        deep = answer()
        send({"jsonrpc": "2.0", "id": 8, "method": "tools/list"})
        after = answer()
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
        proc.stdout.close()
    assert not_json["id"] is None and not_json["error"]["code"] == -32700
    assert not_rpc["id"] == 5 and not_rpc["error"]["code"] == -32600
    assert deep["id"] == 7 and deep["result"]["isError"] is True
    text = deep["result"]["content"][0]["text"]
    assert text.startswith("invalid_request: ") and str(MAX_CONFIG_DEPTH) in text
    assert len(after["result"]["tools"]) == 4


def test_top_level_scalars_reads_id_and_method_at_any_depth() -> None:
    depth = 5000
    line = (
        '{"jsonrpc": "2.0", "id": "a\\"b", "params": '
        + '{"x": [' * depth
        + "1"
        + "]}" * depth
        + ', "method": "tools/call", "n": 3}'
    )
    assert top_level_scalars(line) == {
        "jsonrpc": "2.0",
        "id": 'a"b',
        "method": "tools/call",
        "n": 3,
    }
    assert top_level_scalars("[1, 2]") == {} and top_level_scalars("{oops") == {}


# -- outcomes ---------------------------------------------------------------------------------


@JOB_MODES
async def test_a_job_whose_only_candidate_failed_is_failed_and_says_so(
    mode: str, tmp_path: Path
) -> None:
    async with connected(tmp_path, mode) as client:
        with anyio.fail_after(120):
            missing = structured(
                await client.call_tool(
                    "profile_candidates",
                    # A module, not a file: a missing file is refused before queueing.
                    {"request": softmax_request(candidates=["no_such_module_here:softmax"])},
                )
            )
            wrong = structured(
                await client.call_tool(
                    "profile_candidates",
                    {"request": softmax_request(candidates=[demo_kernels.WRONG_AXIS])},
                )
            )
            stored = structured(
                await client.call_tool("read_results", {"result_id": missing["result_id"]})
            )
    for answer in (missing, wrong, stored["result"]):
        assert answer["status"] == "failed"
        assert answer["error"] is not None
    assert missing["message"].startswith("no candidate passed: the only candidate")
    assert "import_error" in missing["message"]
    assert wrong["message"].startswith("no candidate passed") and "incorrect" in wrong["message"]
    assert "no candidate passed" in stored["message"]
    assert any(r["AvgValue"] is not None for r in missing["rows"])  # the reference's rows stay


@JOB_MODES
async def test_the_message_says_what_to_act_on_and_what_noise_changes(
    mode: str, tmp_path: Path
) -> None:
    async with connected(tmp_path, mode) as client:
        with anyio.fail_after(120):
            answer = structured(
                await client.call_tool("profile_candidates", {"request": softmax_request()})
            )
            read = structured(
                await client.call_tool("read_results", {"result_id": answer["result_id"]})
            )
    message = answer["message"]
    assert "comparison(s) are Resolvable" in message and "act on those" in message
    assert ". Raw per-run values: read_results(" in message  # a full stop before the hint
    assert "Resolvable" in read["message"] and "row(s)" in read["message"]
    for row in answer["rows"]:
        if row["Trust"] == "noisy":
            assert any("interval widened; add runs to tighten it" in r for r in row["Reasons"])
            assert "noisy row(s) (spread or GPU clock: see Reasons): usable" in message


# -- cancel after 'running' ---------------------------------------------------------------------

TORCH_SLEEPER = """
import os, subprocess, time
import torch

def ref(x):
    return x * 2

def sleeper(x):
    child = subprocess.Popen(["sleep", "600"])
    with open({fifo!r}, "w") as f:
        f.write(f"{{os.getpid()}} {{child.pid}}")
    time.sleep(600)
    return x * 2

def make():
    return (torch.ones(4),)
"""


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie may wait for a pid 1 that never reaps)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def _read_pids(fifo: Path) -> tuple[int, int]:
    with fifo.open() as fh:
        worker, child = fh.read().split()
    return int(worker), int(child)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")
async def test_read_results_cancel_kills_a_running_job_and_records_it_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The candidate writes to a FIFO outside its workdir, which confinement would refuse.
    monkeypatch.setenv("NSPY_MCP_CONFINE", "0")
    pytest.importorskip("torch")
    fifo = tmp_path / "pids.fifo"
    os.mkfifo(fifo)
    request = {
        "reference": "ref",
        "candidates": ["sleeper"],
        "inputs": "make",
        "source": textwrap.dedent(TORCH_SLEEPER.format(fifo=str(fifo))),
        "reference_source": textwrap.dedent(TORCH_SLEEPER.format(fifo=str(fifo))),
        "backend": "events",
        "runs": 1,
        "check": {"seeds": 1},
        "wait_s": 0,
    }
    async with connected(tmp_path / "store") as client:
        with anyio.fail_after(180):
            running = structured(await client.call_tool("profile_candidates", {"request": request}))
            assert running["status"] in ("queued", "running")
            worker, child = await anyio.to_thread.run_sync(_read_pids, fifo, abandon_on_cancel=True)
            pgid = os.getpgid(worker)
            assert _running(worker) and _running(child) and pgid != os.getpgid(0)
            cancelled = structured(
                await client.call_tool(
                    "read_results", {"result_id": running["result_id"], "cancel": True}
                )
            )
            again = structured(
                await client.call_tool(
                    "read_results", {"result_id": running["result_id"], "cancel": True}
                )
            )
    result = cancelled["result"]
    assert result["status"] == "cancelled"
    assert result["error"]["ErrorClass"] == "cancelled"
    assert "read_results(cancel=true)" in result["message"]
    assert again["result"]["status"] == "cancelled" and "nothing to cancel" in again["message"]
    deadline = time.monotonic() + 10
    while (_running(worker) or _running(child)) and time.monotonic() < deadline:
        await anyio.sleep(0.1)
    assert not _running(worker) and not _running(child)
    assert _group_members(pgid) == []


async def test_cancel_of_a_finished_job_changes_nothing(tmp_path: Path) -> None:
    async with connected(tmp_path) as client:
        with anyio.fail_after(120):
            done = structured(
                await client.call_tool(
                    "profile_candidates",
                    {"request": softmax_request(candidates=[demo_kernels.VECTORIZED])},
                )
            )
            answer = structured(
                await client.call_tool(
                    "read_results", {"result_id": done["result_id"], "cancel": True}
                )
            )
    assert answer["result"]["status"] == "done"
    assert "nothing to cancel" in answer["message"]
