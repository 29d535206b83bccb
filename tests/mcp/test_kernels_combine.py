"""`kernels.combine` through the real MCP client, before anything runs.

Left out, a call's times and counts are summed (tests/core/test_run_values.py folds them);
what a rate then needs is said up front by validate_metrics, and a request that sums a rate
is refused as a tool error that says what to change, with nothing queued.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import Client

from nsight_core.host.catalog import MetricsValidation
from nspy_mcp.server import build_server
from tests.mcp.test_server import error_text, softmax_request, structured

pytestmark = pytest.mark.anyio

T = "gpu__time_duration.sum"
PCT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"


@pytest.mark.parametrize("combine", ["sum", {T: "sum", PCT: "sum"}], ids=["one", "map"])
async def test_a_request_that_sums_a_rate_is_refused_and_nothing_is_queued(
    tmp_path: Path, combine: str | dict[str, str]
) -> None:
    request = softmax_request(backend="ncu", metrics=[T, PCT], kernels={"combine": combine})
    async with Client(build_server(tmp_path)) as client:
        with anyio.fail_after(60):
            refused = await client.call_tool("profile_candidates", {"request": request})
            listing = structured(await client.call_tool("read_results", {}))
    text = error_text(refused)
    assert "invalid_request" in text and PCT in text and "kernels.combine" in text
    assert listing["total"] == 0


async def test_validate_metrics_says_up_front_which_metrics_a_multi_kernel_call_cannot_sum(
    tmp_path: Path,
) -> None:
    async with Client(build_server(tmp_path)) as client:
        with anyio.fail_after(60):
            answer = await client.call_tool(
                "validate_metrics", {"metrics": [T, PCT], "chip": "gh100"}
            )
    checked = MetricsValidation.model_validate(structured(answer))
    assert checked.all_valid
    [note] = [n for n in checked.notes if "kernels.combine" in n]
    assert note.startswith(f"{PCT} is a rate") and T not in note.split(":")[0]
    assert "kernel_count_mismatch" in note
