"""The Dask executor end to end: a real local cluster (two worker processes, each offering
one `GPU` resource), the real MCP server and client in memory, events jobs on CPU.

One job runs through; one loses its worker mid-job (the worker process is killed) and
finishes on the other; one loses both workers and is recorded failed, naming them. A cluster
and its jobs take 5-15 s per test on 2 cores: those tests are `slow`.
"""

from __future__ import annotations

import os
import re
import signal
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from nsight_core.plan.config import EngineConfig
from nspy_mcp.cluster import run_on_worker
from nspy_mcp.executors import parse_executor
from nspy_mcp.server import build_server
from tests.mcp.test_server import softmax_request, structured

distributed = pytest.importorskip("distributed")
from mcp import Client  # noqa: E402

pytestmark = pytest.mark.anyio

STARTED = re.compile(r"running on Dask worker (\S+) \(host [^,]+, pid (\d+)\)")


@pytest.fixture
async def cluster_address(own_tempdir: Path) -> AsyncIterator[str]:
    """A scheduler and two single-threaded worker processes, each with GPU=1.

    Their scratch space and temporary files are the test's: a worker the test kills cannot
    remove its job's folder."""
    async with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        resources={"GPU": 1},
        dashboard_address=":0",
        host="127.0.0.1",
        asynchronous=True,
        local_directory=str(own_tempdir),
    ) as cluster:
        address = cluster.scheduler_address.removeprefix("tcp://")
        yield f"dask://{address}"


def test_the_executor_is_local_by_default_or_a_dask_scheduler_address() -> None:
    assert parse_executor(EngineConfig.from_env({}).executor) is None
    assert parse_executor("local") is None
    assert parse_executor("dask://gpu-head:8786") == "tcp://gpu-head:8786"
    config = EngineConfig.from_env({"NSPY_MCP_EXECUTOR": " dask://10.0.0.5:8786 "})
    assert parse_executor(config.executor) == "tcp://10.0.0.5:8786"
    with pytest.raises(ValueError, match="dask://HOST:PORT"):
        parse_executor("ray://head:10001")
    assert callable(run_on_worker)


@pytest.mark.slow
async def test_a_job_runs_on_a_worker_and_its_result_and_files_land_in_the_store(
    cluster_address: str, tmp_path: Path
) -> None:
    async with Client(build_server(tmp_path, executor=cluster_address)) as client:
        with anyio.fail_after(60):
            answer = structured(
                await client.call_tool("profile_candidates", {"request": softmax_request()})
            )
            refused = await client.call_tool(
                "profile_candidates", {"request": softmax_request(device=0)}
            )
    assert answer["status"] == "done", answer["message"]
    assert {r["Annotation"] for r in answer["rows"] if r["NumRuns"]} >= {
        softmax_request()["reference"]
    }
    events = Path(answer["artifacts"]["events"])
    assert events.is_file() and events.parent == tmp_path / answer["result_id"]
    assert refused.is_error and "Dask cluster" in str(refused.content[0])


def _slow_request(seconds: float) -> dict[str, Any]:
    """A job whose reference takes `seconds` on its first call: time to kill its worker."""
    source = textwrap.dedent(
        f"""
        import time
        slept = False
        def ref(n):
            global slept
            if not slept:
                slept = True
                time.sleep({seconds})
            return n
        def cand(n):
            return n
        def make():
            return (1,)
        """
    )
    return {
        "reference": "ref",
        "candidates": ["cand"],
        "inputs": "make",
        "source": source,
        "reference_source": source,
        "backend": "events",
        "runs": 1,
        "warmup": 0,
        "check": {"seeds": 1, "check_determinism": False},
        "wait_s": 0,
    }


async def _kill_worker_when_running(client: Client, result_id: str, not_pid: int = 0) -> str:
    """Wait until the job runs on a worker (other than pid `not_pid`), kill it, name it."""
    while True:
        got = structured(
            await client.call_tool("read_results", {"result_id": result_id, "wait_s": 0.2})
        )["result"]
        m = STARTED.search(got["message"])
        if m and int(m.group(2)) != not_pid:
            os.kill(int(m.group(2)), signal.SIGKILL)
            return m.group(0)
        assert got["status"] in ("queued", "running"), got["message"]


@pytest.mark.slow
async def test_a_job_whose_worker_dies_is_retried_once_on_another_worker(
    cluster_address: str, tmp_path: Path
) -> None:
    async with Client(build_server(tmp_path, executor=cluster_address)) as client:
        with anyio.fail_after(90):
            first = structured(
                await client.call_tool("profile_candidates", {"request": _slow_request(2.0)})
            )
            killed = await _kill_worker_when_running(client, first["result_id"])
            final = structured(
                await client.call_tool(
                    "read_results", {"result_id": first["result_id"], "wait_s": 80}
                )
            )["result"]
    assert final["status"] == "done", final["message"]
    lost_worker = STARTED.search(killed)
    assert lost_worker is not None
    notes = final["provenance"]["notes"]
    assert any(f"worker {lost_worker.group(1)}" in n and "lost" in n for n in notes), notes
    assert any(n.startswith("retried on worker") for n in notes), notes
    assert "was lost mid-job" in final["message"]


@pytest.mark.slow
async def test_a_job_that_loses_both_workers_is_recorded_failed_naming_them(
    cluster_address: str, tmp_path: Path
) -> None:
    async with Client(build_server(tmp_path, executor=cluster_address)) as client:
        with anyio.fail_after(90):
            first = structured(
                await client.call_tool("profile_candidates", {"request": _slow_request(30.0)})
            )
            one = await _kill_worker_when_running(client, first["result_id"])
            pid = int(STARTED.search(one).group(2))  # type: ignore[union-attr]
            two = await _kill_worker_when_running(client, first["result_id"], not_pid=pid)
            final = structured(
                await client.call_tool(
                    "read_results", {"result_id": first["result_id"], "wait_s": 60}
                )
            )["result"]
    assert final["status"] == "failed", final["message"]
    assert final["error"]["ErrorClass"] == "crashed"
    for killed in (one, two):
        address = STARTED.search(killed).group(1)  # type: ignore[union-attr]
        assert address in final["error"]["Error"]
    assert "retried once" in final["error"]["Error"]
