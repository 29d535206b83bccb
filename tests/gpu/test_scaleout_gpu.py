"""Scale-out on a real GPU: local dispatch pins a job to one GPU, and a Dask worker runs one.

Run on a GPU host: ``python -m pytest -m gpu -s tests/gpu/test_scaleout_gpu.py``. The cluster
test uses dask-cuda's `LocalCUDACluster` (one worker per GPU, its CUDA_VISIBLE_DEVICES set)
when it is installed, else a `LocalCluster` with one worker offering ``GPU=1``. The wheelhouse
needs the `cluster` extra (``tools/build_wheelhouse.py --extra cluster``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from nsight_core.host.probe import list_gpus
from nspy_mcp.devices import DeviceLocks
from nspy_mcp.server import build_server

pytestmark = [pytest.mark.gpu, pytest.mark.anyio]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _softmax(**extra: Any) -> dict[str, Any]:
    return {
        "reference": "gpu_softmax_reference.py:torch_softmax",
        "candidates": ["gpu_softmax.py:triton_softmax"],
        "inputs": "gpu_softmax_reference.py:make_inputs",
        "workdir": str(EXAMPLES),
        "configs": [{"rows": 4096, "cols": 4096}],
        "backend": "events",
        "runs": 3,
        "wait_s": 600,
    } | extra


async def test_a_named_gpu_is_the_one_the_job_ran_on(tmp_path: Path) -> None:
    gpus = list_gpus()
    assert gpus, "no GPU visible"
    last = gpus[-1]
    async with Client(build_server(tmp_path, locks=DeviceLocks(tmp_path / "locks"))) as client:
        with anyio.fail_after(600):
            got = await client.call_tool(
                "profile_candidates", {"request": _softmax(device=last.index)}
            )
    answer = got.structured_content or {}
    print(f"\n[local device {last.index}] {answer.get('status')}: {answer.get('message')}")
    assert answer["status"] == "done", answer["message"]
    assert answer["provenance"]["gpu_index"] == last.index
    assert answer["provenance"]["gpu_uuid"] == last.uuid
    assert all(r["GPUUUID"] == last.uuid for r in answer["rows"])


async def test_one_job_through_a_local_dask_gpu_cluster(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    try:
        from dask_cuda import LocalCUDACluster

        cluster = LocalCUDACluster(
            n_workers=1, resources={"GPU": 1}, dashboard_address=":0", asynchronous=True
        )
        kind = "LocalCUDACluster"
    except ImportError:
        cluster = distributed.LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            resources={"GPU": 1},
            dashboard_address=":0",
            asynchronous=True,
        )
        kind = "LocalCluster GPU=1"
    async with cluster:
        address = "dask://" + cluster.scheduler_address.removeprefix("tcp://")
        t0 = time.monotonic()
        async with Client(build_server(tmp_path, executor=address)) as client:
            with anyio.fail_after(600):
                got = await client.call_tool("profile_candidates", {"request": _softmax()})
    answer = got.structured_content or {}
    print(
        f"\n[{kind}] {time.monotonic() - t0:.1f} s: {answer.get('status')}: {answer.get('message')}"
    )
    assert answer["status"] == "done", answer["message"]
    assert answer["provenance"]["gpu_uuid"] in {g.uuid for g in list_gpus()}
    assert all(r["GPUUUID"] for r in answer["rows"])
    assert Path(answer["artifacts"]["events"]).parent == tmp_path / answer["result_id"]
