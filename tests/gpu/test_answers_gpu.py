"""Answers under ncu stay small and link to the report: several candidates, configs, metrics.

The CPU test (tests/mcp/test_answer_links.py) has one metric (events); here ncu measures
three on each of three configs, and the answer's links include the ncu report and log,
read back whole through the real MCP client.
"""

from __future__ import annotations

import base64
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.types import BlobResourceContents

from nspy_mcp import demo_kernels
from nspy_mcp.server import build_server
from tests.mcp.test_answer_links import check_links, links_of, small_answer

pytestmark = [pytest.mark.gpu, pytest.mark.anyio]

METRICS = [
    "gpu__time_duration.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_an_ncu_job_with_three_metrics_answers_small_and_links_its_report(
    tmp_path: Path,
) -> None:
    request = {
        "reference": demo_kernels.TORCH_REFERENCE,
        "candidates": [demo_kernels.TORCH_FUSED, demo_kernels.TORCH_WRONG_AXIS],
        "inputs": demo_kernels.TORCH_INPUTS,
        "workdir": str(demo_kernels.DIRECTORY),
        "configs": [{"rows": r, "cols": 1024} for r in (256, 1024, 4096)],
        "backend": "ncu",
        "metrics": METRICS,
        "runs": 3,
        "wait_s": 600,
    }
    async with Client(build_server(tmp_path)) as client:
        with anyio.fail_after(900):
            result = await client.call_tool("profile_candidates", {"request": request})
        done = small_answer(result)
        rid = done["result_id"]
        assert done["status"] == "done", done["message"]
        whole = await check_links(client, result, rid)
        assert {r["Metric"] for r in whole["rows"]} >= set(METRICS)
        links = links_of(result)
        report_uri = f"nspy://results/{rid}/files/report.ncu-rep"
        assert report_uri in links and f"nspy://results/{rid}/files/ncu.log" in links
        (blob,) = (await client.read_resource(report_uri)).contents
        assert isinstance(blob, BlobResourceContents)
        stored = (tmp_path / rid / "report.ncu-rep").read_bytes()
        assert base64.b64decode(blob.blob) == stored
        small_answer(await client.call_tool("read_results", {"result_id": rid}))
