"""Answers stay small whatever the job's size, and link to where the full data is.

A real job with several candidates and configs (events backend, CPU) makes a result too
large for one answer; each tool answer is then at most 16 KB of text (and of structured
content, which some hosts show instead), says what it left out, and carries resource links
that the real MCP client reads back: the whole result, its rows as CSV, the job's files.
"""

from __future__ import annotations

import base64
import csv
import io
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp.types import BlobResourceContents, CallToolResult, ResourceLink

from nsight_core.errors import ErrorClass
from nsight_core.request import ProfileRequest
from nsight_core.store.result_store import ResultStore
from nspy_mcp.links import RESULT_FILES
from nspy_mcp.server import build_server
from tests.mcp.test_server import structured

pytestmark = pytest.mark.anyio

TEXT_LIMIT = 16 * 1024
"""Issue 28: every tool answer's text under 16 KB at the default detail."""

REFERENCE_FILE = """
import numpy as np

def ref(x):
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        e = np.exp(x[i] - x[i].max())
        out[i] = e / e.sum()
    return out

def make(rows, cols):
    return (np.random.standard_normal((rows, cols)).astype(np.float32),)
"""

CANDIDATES_FILE = """
import numpy as np

def vectorized(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)

def in_float64(x):
    y = x.astype(np.float64)
    e = np.exp(y - y.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)

def two_steps(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    s = e.sum(axis=1, keepdims=True)
    return e / s

def wrong_axis(x):
    e = np.exp(x - x.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)

def raises(x):
    raise ValueError("not written yet")
"""


def many_request(folder: Path) -> dict[str, Any]:
    """Six annotations on six configs: more rows, comparisons and checks than 16 KB hold."""
    folder.mkdir(exist_ok=True)
    (folder / "ref.py").write_text(REFERENCE_FILE)
    (folder / "cands.py").write_text(CANDIDATES_FILE)
    names = ["vectorized", "in_float64", "two_steps", "wrong_axis", "raises"]
    return {
        "reference": "ref.py:ref",
        "candidates": [f"cands.py:{name}" for name in names],
        "inputs": "ref.py:make",
        "workdir": str(folder),
        "configs": [{"rows": r, "cols": c} for r in (4, 8, 16) for c in (8, 32)],
        "backend": "events",
        "runs": 2,
        "check": {"seeds": 1},
        "wait_s": 120,
    }


def small_answer(result: CallToolResult) -> dict[str, Any]:
    """The answer's structured content, after checking that its text is that JSON, small."""
    answer = structured(result)
    text = result.content[0]
    assert text.type == "text"
    assert len(text.text) < TEXT_LIMIT
    assert json.loads(text.text) == answer  # the text is the structure, so both are small
    return answer


def links_of(result: CallToolResult) -> dict[str, ResourceLink]:
    return {c.uri: c for c in result.content if isinstance(c, ResourceLink)}


def _compact_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")))


async def _read_text(client: Client, uri: str) -> str:
    contents = (await client.read_resource(uri)).contents
    assert len(contents) == 1 and hasattr(contents[0], "text"), uri
    return str(contents[0].text)


async def check_links(client: Client, result: CallToolResult, rid: str) -> dict[str, Any]:
    """Read every link of a finished result's answer; the whole stored result, returned."""
    links = links_of(result)
    whole_uri = f"nspy://results/{rid}"
    assert whole_uri in links
    whole: dict[str, Any] = json.loads(await _read_text(client, whole_uri))
    assert whole["result_id"] == rid
    table = list(csv.DictReader(io.StringIO(await _read_text(client, f"{whole_uri}/rows.csv"))))
    assert len(table) == len(whole["rows"]) > 0
    assert [json.loads(r["RawValues"]) for r in table] == [r["RawValues"] for r in whole["rows"]]
    for uri, link in links.items():
        contents = (await client.read_resource(uri)).contents
        assert contents and contents[0].mime_type == link.mime_type, uri
        body = contents[0]
        if link.size is not None:
            if isinstance(body, BlobResourceContents):
                got = len(base64.b64decode(body.blob))
            else:
                got = len(body.text.encode())
            assert got == link.size, uri
    return whole


async def test_a_large_job_answers_in_under_16_kb_and_links_to_all_of_it(tmp_path: Path) -> None:
    async with Client(build_server(tmp_path)) as client:
        with anyio.fail_after(180):
            request = many_request(tmp_path / "kernels")
            result = await client.call_tool("profile_candidates", {"request": request})
        done = small_answer(result)
        rid = done["result_id"]
        assert done["status"] == "done"
        whole = await check_links(client, result, rid)
        assert f"nspy://results/{rid}/files/events.jsonl" in links_of(result)

        # The job really was too large: its compact form alone is over the limit...
        assert _compact_size(whole) > 2 * TEXT_LIMIT
        assert len(done["rows"]) < len(whole["rows"])
        # ...and the answer kept what an agent acts on first, and says what it left out.
        assert len(done["comparisons"]) == len(whole["comparisons"]) == 18
        assert len(done["failures"]) == len(whole["failures"]) == 6
        failed_checks = [c for c in whole["correctness"] if not c["Passed"]]
        shown_checks = [c for c in done["correctness"] if not c["Passed"]]
        assert shown_checks == failed_checks[: len(shown_checks)]
        message = done["message"]
        assert f"{len(done['rows'])} of {len(whole['rows'])} rows" in message
        assert message.count(f"resource nspy://results/{rid},") == 1
        assert f"nspy://results/{rid}/rows.csv" in message
        assert "read_results(result_id=" in message

        read = await client.call_tool("read_results", {"result_id": rid})
        answer = small_answer(read)
        assert links_of(read).keys() == links_of(result).keys()
        assert len(answer["result"]["rows"]) < len(whole["rows"])
        assert "more were cut to fit" in answer["message"]
        assert f"nspy://results/{rid}" in answer["message"]

        narrowed = small_answer(
            await client.call_tool(
                "read_results",
                {"result_id": rid, "annotation": "cands.py:vectorized", "config_id": 1},
            )
        )
        assert [r["Annotation"] for r in narrowed["result"]["rows"]] == ["cands.py:vectorized"]
        assert f"Showing 1 of {len(whole['rows'])} row(s)" in narrowed["message"]

        full = structured(
            await client.call_tool("read_results", {"result_id": rid, "detail": "full"})
        )
        assert len(full["result"]["rows"]) == len(whole["rows"])  # detail='full' is not cut


async def test_a_long_listing_is_cut_and_its_cursor_continues_after_the_last_shown(
    tmp_path: Path,
) -> None:
    store = ResultStore(tmp_path / "store")
    request = ProfileRequest.model_validate(many_request(tmp_path / "kernels"))
    for _ in range(60):
        rid = store.create(request).result_id
        store.fail(rid, ErrorClass.CANCELLED, "stopped before it started", status="cancelled")
    async with Client(build_server(store)) as client:
        page = small_answer(await client.call_tool("read_results", {"limit": 100}))
        shown = [s["result_id"] for s in page["results"]]
        assert 0 < len(shown) < 60 and page["total"] == 60
        assert page["next_cursor"] == shown[-1] and "cut to" in page["message"]
        rest = small_answer(
            await client.call_tool("read_results", {"limit": 100, "cursor": page["next_cursor"]})
        )
        assert not set(shown) & {s["result_id"] for s in rest["results"]}


async def test_small_answers_of_every_tool_fit_and_long_metric_lists_are_cut(
    tmp_path: Path,
) -> None:
    names = [f"sm__made_up_counter_{i}.sum" for i in range(200)] + ["gpu__time_duration.sum"]
    async with Client(build_server(tmp_path)) as client:
        small_answer(await client.call_tool("check_environment", {}))
        checked = small_answer(
            await client.call_tool("validate_metrics", {"metrics": names, "chip": "gh100"})
        )
        assert not checked["all_valid"]
        assert 0 < len(checked["metrics"]) < len(names)
        assert any("cut to" in note for note in checked["notes"])
        few = small_answer(
            await client.call_tool("validate_metrics", {"metrics": names[-2:], "chip": "gh100"})
        )
        assert len(few["metrics"]) == 2 and few["metrics"][1]["description"]


async def test_job_files_are_served_only_as_regular_files_of_the_result(tmp_path: Path) -> None:
    async with Client(build_server(tmp_path)) as client:
        request = many_request(tmp_path / "kernels") | {"configs": [{"rows": 4, "cols": 8}]}
        with anyio.fail_after(120):
            result = await client.call_tool("profile_candidates", {"request": request})
        rid = small_answer(result)["result_id"]
        await check_links(client, result, rid)
        uri = f"nspy://results/{rid}/files/"
        with pytest.raises(MCPError):  # the events backend writes no ncu report
            await client.read_resource(uri + "report.ncu-rep")
        stdout = tmp_path / rid / "stdout.txt"
        stdout.unlink(missing_ok=True)
        stdout.symlink_to(tmp_path / rid / "result.json")
        with pytest.raises(MCPError):
            await client.read_resource(uri + "stdout.txt")
        templates = (await client.list_resource_templates()).resource_templates
        served = {t.uri_template for t in templates}
        assert {f"nspy://results/{{result_id}}/files/{f.name}" for f in RESULT_FILES} <= served
