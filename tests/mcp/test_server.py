"""The MCP server through the real MCP client: in memory (both protocol eras) and over stdio.

Profile jobs here are real: the events backend on CPU runs the numpy softmax kernels of
`nspy_mcp.demo_kernels` in a real worker process, tiny configs, 1-2 runs.

The tool-schema snapshot lives in ``tests/mcp/tool_schemas.json``. After a deliberate change
to a tool's arguments or answers, regenerate it and review the diff:

    NSPY_UPDATE_SNAPSHOTS=1 python -m pytest tests/mcp/test_server.py -k snapshot
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.types import CallToolResult, Tool

from nsight_core.host.catalog import MetricsValidation
from nsight_core.host.probe import EnvironmentReport
from nsight_core.request import ProfileRequest
from nsight_core.results import ProfileResult
from nsight_core.store.manifest import result_manifest
from nsight_core.store.result_store import RESULT_FILE, ResultStore
from nspy_mcp import demo_kernels
from nspy_mcp.schemas import advertised_output
from nspy_mcp.server import RESULT_OUTPUT, build_server, serve

pytestmark = pytest.mark.anyio

MODES = pytest.mark.parametrize("mode", ["auto", "legacy"])
JOB_MODES = pytest.mark.parametrize(
    "mode", ["auto", pytest.param("legacy", marks=pytest.mark.slow)]
)
"""For tests that run a real job: the job runs the same in both protocol eras, so the legacy
era's run of it is `slow` (the era's own answers are checked by the tests without a job)."""
SNAPSHOT = Path(__file__).with_name("tool_schemas.json")
UPDATE_ENV = "NSPY_UPDATE_SNAPSHOTS"


def softmax_request(**overrides: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "reference": demo_kernels.REFERENCE,
        "candidates": [demo_kernels.VECTORIZED, demo_kernels.WRONG_AXIS],
        "inputs": demo_kernels.INPUTS,
        "workdir": str(demo_kernels.DIRECTORY),
        "configs": [{"rows": 8, "cols": 16}],
        "backend": "events",
        "runs": 2,
        "check": {"seeds": 1},
    }
    request.update(overrides)
    return request


def sleeper_request(fifo: Path) -> dict[str, Any]:
    """A candidate that reports its pid through a FIFO, then sleeps until it is killed."""
    source = textwrap.dedent(
        f"""
        import os, time
        def ref(n):
            return n
        def sleeper(n):
            with open({str(fifo)!r}, "w") as f:
                f.write(str(os.getpid()))
            time.sleep(600)
            return n
        def make():
            return (1,)
        """
    )
    return {
        "reference": "ref",
        "candidates": ["sleeper"],
        "inputs": "make",
        "source": source,
        "reference_source": source,
        "backend": "events",
        "runs": 1,
        "check": {"seeds": 1},
    }


def _read_fifo(path: Path) -> str:
    with path.open() as fh:  # blocks until the candidate opens it for writing
        return fh.read()


def _pid_alive(pid: int) -> bool:
    """Running or sleeping; a zombie (killed, waiting for its reaper) counts as dead."""
    try:
        os.kill(pid, 0)
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (ProcessLookupError, FileNotFoundError):
        return False
    return state != "Z"


def structured(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return dict(result.structured_content)


def error_text(result: CallToolResult) -> str:
    assert result.is_error
    first = result.content[0]
    assert first.type == "text"
    return first.text


@asynccontextmanager
async def connected(store: Path, mode: str = "auto") -> AsyncIterator[Client]:
    async with Client(build_server(store), mode=mode) as client:
        yield client


def _seed_results(store_dir: Path, n: int) -> list[str]:
    """Finished results written through the store itself (no worker), for listing tests."""
    request = ProfileRequest.model_validate(softmax_request())
    with ResultStore(store_dir) as store:
        ids = []
        for _ in range(n):
            placeholder = store.create(request)
            done = placeholder.model_copy(update={"status": "done", "message": "done"})
            ids.append(store.finish(done).result_id)
    return ids


# -- schemas -------------------------------------------------------------------------------


def _prop_digest(prop: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """What a property accepts, the same whether a definition is referenced or written in
    place (`nspy_mcp.schemas.inline_single_refs`), nested objects field by field."""
    ref = prop.get("$ref")
    if isinstance(ref, str):
        prop = {
            **defs[ref.removeprefix("#/$defs/")],
            **{k: v for k, v in prop.items() if k != "$ref"},
        }
    keys = ("type", "enum", "default", "minimum", "maximum", "pattern", "const")
    digest = {k: prop[k] for k in keys if k in prop}
    if "anyOf" in prop:
        digest["anyOf"] = [_prop_digest(p, defs) for p in prop["anyOf"]]
    if "items" in prop:
        digest["items"] = _prop_digest(prop["items"], defs)
    if "properties" in prop:
        digest["required"] = sorted(prop.get("required", []))
        digest["properties"] = {
            k: _prop_digest(v, defs) for k, v in sorted(prop["properties"].items())
        }
    return digest


def _schema_digest(tools: list[Tool]) -> dict[str, Any]:
    digest: dict[str, Any] = {}
    for tool in sorted(tools, key=lambda t: t.name):
        inp, out = tool.input_schema, tool.output_schema or {}
        ann = tool.annotations
        assert ann is not None
        digest[tool.name] = {
            "title": tool.title,
            "annotations": {
                "readOnlyHint": ann.read_only_hint,
                "destructiveHint": ann.destructive_hint,
                "idempotentHint": ann.idempotent_hint,
                "openWorldHint": ann.open_world_hint,
            },
            "input": _prop_digest(inp, inp.get("$defs", {})),
            # Output schemas check types, not presence (nspy_mcp/schemas.py): their fields.
            "output_properties": sorted(out.get("properties", {})),
        }
    return digest


@MODES
async def test_tool_schemas_match_the_snapshot(mode: str, tmp_path: Path) -> None:
    async with connected(tmp_path, mode) as client:
        digest = _schema_digest((await client.list_tools()).tools)
    if os.environ.get(UPDATE_ENV):
        SNAPSHOT.write_text(json.dumps(digest, indent=1, sort_keys=True) + "\n")
    assert digest == json.loads(SNAPSHOT.read_text())


async def test_every_tool_has_an_output_schema_and_profile_publishes_the_store_schema_trimmed(
    tmp_path: Path,
) -> None:
    async with connected(tmp_path) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == {
        "check_environment",
        "validate_metrics",
        "profile_candidates",
        "read_results",
    }
    assert all(t.output_schema for t in tools.values())
    # The store validates stored results against the full schema; tools/list carries it
    # trimmed (tests/mcp/test_tool_list.py shows it refuses the same wrong answers).
    assert tools["profile_candidates"].output_schema == advertised_output(
        ProfileResult.model_json_schema(), RESULT_OUTPUT
    )
    assert all(len(t.description or "") > 200 for t in tools.values())


# -- arguments and ids -----------------------------------------------------------------------


@MODES
async def test_unknown_arguments_are_rejected_naming_them(mode: str, tmp_path: Path) -> None:
    async with connected(tmp_path, mode) as client:
        top = await client.call_tool("read_results", {"resultid": "x", "limit": 2})
        nested = await client.call_tool("profile_candidates", {"request": softmax_request(run=3)})
        env = await client.call_tool("check_environment", {"deeep": True})
    assert "resultid" in error_text(top) and "'result_id'" in error_text(top)
    assert "request.run is not a known field" in error_text(nested)
    assert "did you mean 'runs'" in error_text(nested)
    assert "deeep" in error_text(env)


@MODES
@pytest.mark.parametrize(
    "args",
    [
        {"result_id": "../x"},
        {"result_id": "/"},
        {"result_id": "r20261201T120000123-0a1b2c3d/../../etc"},
        {"cursor": "../../x"},
    ],
)
async def test_ids_that_are_not_result_ids_are_rejected(
    mode: str, args: dict[str, Any], tmp_path: Path
) -> None:
    async with connected(tmp_path, mode) as client:
        result = await client.call_tool("read_results", args)
    assert next(iter(args)) in error_text(result)


@MODES
async def test_a_resource_with_a_bad_or_unknown_id_is_a_protocol_error(
    mode: str, tmp_path: Path
) -> None:
    async with connected(tmp_path, mode) as client:
        for uri in (
            "nspy://results/..%2F..%2Fetc/rows",
            "nspy://results/r20261201T120000123-0a1b2c3d",
        ):
            with pytest.raises(MCPError):
                await client.read_resource(uri)


async def test_an_unknown_result_id_is_a_tool_error_saying_how_to_list(tmp_path: Path) -> None:
    async with connected(tmp_path) as client:
        result = await client.call_tool(
            "read_results", {"result_id": "r20261201T120000123-0a1b2c3d"}
        )
    assert "invalid_request" in error_text(result)
    assert "without result_id" in error_text(result)


async def test_listing_filters_do_not_combine_with_a_result_id(tmp_path: Path) -> None:
    (result_id,) = _seed_results(tmp_path, 1)
    async with connected(tmp_path) as client:
        result = await client.call_tool("read_results", {"result_id": result_id, "status": "done"})
    assert "status" in error_text(result)


async def test_a_bad_time_filter_is_a_tool_error(tmp_path: Path) -> None:
    async with connected(tmp_path) as client:
        result = await client.call_tool("read_results", {"since": "yesterday"})
    assert "since" in error_text(result) and "ISO 8601" in error_text(result)


# -- errors before anything runs ------------------------------------------------------------------


async def test_a_request_that_cannot_run_here_is_refused_and_nothing_is_queued(
    tmp_path: Path,
) -> None:
    async with connected(tmp_path) as client:
        bad_dir = await client.call_tool(
            "profile_candidates", {"request": softmax_request(workdir=str(tmp_path / "nope"))}
        )
        listing = structured(await client.call_tool("read_results", {}))
    assert "invalid_request" in error_text(bad_dir) and "workdir" in error_text(bad_dir)
    assert listing["total"] == 0


# -- the profile -> read loop --------------------------------------------------------------


@JOB_MODES
async def test_profile_then_read_shows_verdicts_speedups_and_raw_values_on_request(
    mode: str, tmp_path: Path
) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with connected(tmp_path, mode) as client:
        with anyio.fail_after(120):
            answer = structured(
                await client.call_tool(
                    "profile_candidates",
                    {"request": softmax_request()},
                    progress_callback=on_progress,
                )
            )
            result_id = answer["result_id"]
            full = structured(
                await client.call_tool("read_results", {"result_id": result_id, "detail": "full"})
            )
            narrowed = structured(
                await client.call_tool(
                    "read_results",
                    {"result_id": result_id, "annotation": demo_kernels.VECTORIZED},
                )
            )
            rows = await client.read_resource(f"nspy://results/{result_id}/rows")
            manifest = await client.read_resource(f"nspy://results/{result_id}/manifest")

    assert answer["status"] == "done", answer["message"]
    verdicts = {c["Annotation"]: c for c in answer["correctness"]}
    assert verdicts[demo_kernels.VECTORIZED]["Passed"] is True
    assert verdicts[demo_kernels.WRONG_AXIS]["Passed"] is False
    assert verdicts[demo_kernels.WRONG_AXIS]["ErrorClass"] == "incorrect"
    timed = {r["Annotation"] for r in answer["rows"] if r["NumRuns"] > 0}
    assert demo_kernels.WRONG_AXIS not in timed
    assert {demo_kernels.REFERENCE, demo_kernels.VECTORIZED} <= timed
    assert [c["Annotation"] for c in answer["comparisons"] if c["Speedup"] is not None] == [
        demo_kernels.VECTORIZED
    ]
    assert all(r["RawValues"] == [] for r in answer["rows"])
    assert "detail='full'" in answer["message"]

    full_rows = full["result"]["rows"]
    assert any(len(r["RawValues"]) == 2 for r in full_rows)
    assert {r["Annotation"] for r in narrowed["result"]["rows"]} == {demo_kernels.VECTORIZED}
    assert "Showing" in narrowed["message"]

    rows_text = rows.contents[0]
    assert rows_text.mime_type == "application/json"
    assert len(json.loads(getattr(rows_text, "text", "[]"))) == len(full_rows)
    served = json.loads(getattr(manifest.contents[0], "text", "{}"))
    assert served["request"]["backend"] == "events"
    with ResultStore(tmp_path) as store:  # the resource and the store share one builder
        assert served == result_manifest(store.load(result_id), store.load_request(result_id))

    assert seen, "no progress notifications arrived"
    values = [p for p, _, _ in seen]
    assert values == sorted(values) and values[-1] == 100.0
    assert all(total == 100.0 for _, total, _ in seen)
    assert any(m and m.startswith("profile ") for _, _, m in seen)


async def test_a_job_that_outlasts_wait_s_answers_running_and_read_results_waits_for_it(
    tmp_path: Path,
) -> None:
    async with connected(tmp_path) as client:
        with anyio.fail_after(120):
            first = structured(
                await client.call_tool("profile_candidates", {"request": softmax_request(wait_s=0)})
            )
            result_id = first["result_id"]
            final = structured(
                await client.call_tool("read_results", {"result_id": result_id, "wait_s": 120})
            )
    assert first["status"] in {"queued", "running"}
    assert f"call read_results with result_id={result_id}" in first["message"]
    assert final["result"]["status"] == "done"


async def test_concurrent_profile_calls_queue_and_all_finish(tmp_path: Path) -> None:
    # Three calls at once: one job runs, two wait in the queue (each more costs a job's
    # start, about 3 s on 2 cores, and shows nothing new).
    calls = 3
    answers: list[dict[str, Any]] = []
    messages: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    async with connected(tmp_path) as client:

        async def one(i: int) -> None:
            request = softmax_request(
                candidates=[demo_kernels.VECTORIZED], runs=1, configs=[{"rows": 2, "cols": 4 + i}]
            )
            answers.append(
                structured(
                    await client.call_tool(
                        "profile_candidates",
                        {"request": request | {"wait_s": 300}},
                        progress_callback=on_progress,
                    )
                )
            )

        with anyio.fail_after(300):
            async with anyio.create_task_group() as tg:
                for i in range(calls):
                    tg.start_soon(one, i)
            listing = structured(await client.call_tool("read_results", {"limit": 100}))

    assert [a["status"] for a in answers] == ["done"] * calls
    assert len({a["result_id"] for a in answers}) == calls
    assert listing["total"] == calls
    assert any("queued: another job of this server" in m for m in messages)


@JOB_MODES
async def test_cancelling_the_call_kills_the_job_and_records_it_cancelled(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The candidate writes to a FIFO outside its workdir, which confinement would refuse.
    monkeypatch.setenv("NSPY_MCP_CONFINE", "0")
    fifo = tmp_path / "pid.fifo"
    os.mkfifo(fifo)
    async with connected(tmp_path / "store", mode) as client:
        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                call_scope = anyio.CancelScope()

                async def call() -> None:
                    with call_scope:
                        await client.call_tool(
                            "profile_candidates", {"request": sleeper_request(fifo)}
                        )

                tg.start_soon(call)
                pid = int(await anyio.to_thread.run_sync(_read_fifo, fifo, abandon_on_cancel=True))
                assert _pid_alive(pid)
                call_scope.cancel()
            listing = structured(await client.call_tool("read_results", {}))
            result_id = listing["results"][0]["result_id"]
            answer = structured(
                await client.call_tool("read_results", {"result_id": result_id, "wait_s": 60})
            )
    result = answer["result"]
    assert result["status"] == "cancelled"
    assert result["error"]["ErrorClass"] == "cancelled"
    assert not _pid_alive(pid)


async def test_closing_the_connection_cancels_its_running_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The candidate writes to a FIFO outside its workdir, which confinement would refuse.
    monkeypatch.setenv("NSPY_MCP_CONFINE", "0")
    fifo = tmp_path / "pid.fifo"
    os.mkfifo(fifo)
    store = tmp_path / "store"
    with anyio.fail_after(120):
        async with connected(store) as client:
            running = structured(
                await client.call_tool(
                    "profile_candidates", {"request": sleeper_request(fifo) | {"wait_s": 0}}
                )
            )
            pid = int(await anyio.to_thread.run_sync(_read_fifo, fifo, abandon_on_cancel=True))
    stored = ResultStore(store).load(running["result_id"])
    assert stored.status == "cancelled"
    assert stored.error is not None and stored.error.ErrorClass == "cancelled"
    assert "shut down" in stored.message
    assert not _pid_alive(pid)


async def test_results_survive_a_server_restart(tmp_path: Path) -> None:
    with anyio.fail_after(120):
        async with connected(tmp_path) as client:
            first = structured(
                await client.call_tool("profile_candidates", {"request": softmax_request()})
            )
        async with connected(tmp_path, "legacy") as client:
            again = structured(
                await client.call_tool(
                    "read_results", {"result_id": first["result_id"], "detail": "compact"}
                )
            )
    assert first["status"] == "done"
    assert again["result"]["rows"] == first["rows"]
    assert again["result"]["comparisons"] == first["comparisons"]


# -- listings, corrupt files ---------------------------------------------------------------------


@MODES
async def test_a_listing_pages_with_a_cursor_it_names(mode: str, tmp_path: Path) -> None:
    ids = _seed_results(tmp_path, 5)
    seen: list[str] = []
    async with connected(tmp_path, mode) as client:
        args: dict[str, Any] = {"limit": 2, "status": "done"}
        while True:
            page = structured(await client.call_tool("read_results", args))
            seen.extend(r["result_id"] for r in page["results"])
            if page["next_cursor"] is None:
                assert "last page" in page["message"]
                break
            assert f"cursor='{page['next_cursor']}'" in page["message"]
            args["cursor"] = page["next_cursor"]
    assert seen == ids[::-1]


async def test_a_corrupt_stored_result_is_a_tool_error_naming_the_file(tmp_path: Path) -> None:
    (result_id,) = _seed_results(tmp_path, 1)
    path = tmp_path / result_id / RESULT_FILE
    path.write_text('{"result_id": 3}')
    async with connected(tmp_path) as client:
        result = await client.call_tool("read_results", {"result_id": result_id})
    assert "corrupt" in error_text(result) and str(path) in error_text(result)


# -- environment tools, prompt -------------------------------------------------------------------


@MODES
async def test_environment_and_metric_tools_answer_with_their_models(
    mode: str, tmp_path: Path
) -> None:
    async with connected(tmp_path, mode) as client:
        with anyio.fail_after(60):
            env_answer = await client.call_tool("check_environment", {})
            metrics_answer = await client.call_tool(
                "validate_metrics",
                {"metrics": ["gpu__time_duration.sum", "dram__throughput"], "chip": "gh100"},
            )
    env = EnvironmentReport.model_validate(structured(env_answer))
    assert [b.name for b in env.backends] == ["ncu", "cupti", "events"]
    assert env.backend("events").available  # time only, works without a GPU too
    assert {f.name for f in env.frameworks} >= {"torch", "triton", "cupy"}

    metrics = MetricsValidation.model_validate(structured(metrics_answer))
    assert (metrics.chip, metrics.chip_source, metrics.catalog_source) == (
        "gh100",
        "argument",
        "shipped",
    )
    duration, base = metrics.metrics
    assert (duration.name, duration.status, duration.unit) == (
        "gpu__time_duration.sum",
        "valid",
        "ns",
    )
    assert base.status == "needs_suffix"
    assert "dram__throughput.avg.pct_of_peak_sustained_elapsed" in base.valid_names
    assert metrics.all_valid is False


async def test_the_prompt_walks_the_check_validate_profile_read_loop(tmp_path: Path) -> None:
    async with connected(tmp_path) as client:
        prompt = await client.get_prompt("optimize_kernel", {"reference": "k.py:ref"})
    content = prompt.messages[0].content
    text = getattr(content, "text", "")
    order = [
        text.index(t)
        for t in ("check_environment", "validate_metrics", "profile_candidates", "read_results")
    ]
    assert order == sorted(order) and "k.py:ref" in text


# -- processes -----------------------------------------------------------------------------------


async def test_a_stdio_subprocess_round_trip(tmp_path: Path) -> None:
    # No subcommand: serving stdio is the default; the store comes from the environment.
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nspy_mcp"],
        env={**os.environ, "NSPY_MCP_STORE": str(tmp_path)},
    )
    with anyio.fail_after(120):
        async with Client(params) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            answer = structured(
                await client.call_tool(
                    "profile_candidates",
                    {"request": softmax_request(candidates=[demo_kernels.VECTORIZED], runs=1)},
                )
            )
    assert "profile_candidates" in names
    assert answer["status"] == "done"
    assert (tmp_path / answer["result_id"] / RESULT_FILE).is_file()


FRAMEWORKS = ("torch", "triton", "cupy", "nspy_mcp.demo_kernels")

TORCH_SOFTMAX = textwrap.dedent(
    """
    import torch

    def ref(x):
        return torch.softmax(x, dim=-1)

    def cand(x):
        e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
        return e / e.sum(dim=-1, keepdim=True)

    def make(rows, cols):
        return (torch.randn(rows, cols),)
    """
)


def test_the_server_process_never_imports_frameworks_or_candidate_code(tmp_path: Path) -> None:
    # A CPU-torch job runs through the server in a fresh process; the worker is a
    # subprocess, so only it may import torch. Checked right after build_server and again
    # after the job finished.
    request = {
        "reference": "ref",
        "candidates": ["cand"],
        "inputs": "make",
        "source": TORCH_SOFTMAX,
        "reference_source": TORCH_SOFTMAX,
        "configs": [{"rows": 4, "cols": 8}],
        "backend": "events",
        "runs": 1,
        "check": {"seeds": 1},
    }
    code = textwrap.dedent(
        f"""
        import json, sys
        import anyio
        from mcp import Client
        from nspy_mcp.server import build_server

        def loaded():
            return sorted(m for m in {FRAMEWORKS!r} if m in sys.modules)

        async def main():
            server = build_server({str(tmp_path)!r})
            before = loaded()
            async with Client(server) as client:
                answer = await client.call_tool("profile_candidates", {{"request": {request!r}}})
            print(json.dumps({{"before": before, "after": loaded(),
                               "answer": answer.structured_content}}))

        anyio.run(main)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    answer = seen["answer"]
    assert answer["status"] == "done", answer["message"]
    assert [c["Passed"] for c in answer["correctness"]] == [True]
    assert all(r["NumRuns"] == 1 for r in answer["rows"])  # torch ran, in the worker
    assert seen["before"] == [] and seen["after"] == []


def test_http_is_refused_on_a_non_loopback_address(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert serve(http=True, host="0.0.0.0", port=8765, store=str(tmp_path)) == 2
    assert "refusing" in capsys.readouterr().err
