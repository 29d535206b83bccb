"""A request's files as a Dask worker gets them: shipped folders, paths pointed at the
worker's copies, and the result's text mapped back to the user's paths."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import Client

from nsight_core.processes.sandbox import landlock_abi
from nsight_core.request import ProfileRequest
from nspy_mcp.cluster_files import pack_request, unpack_request
from nspy_mcp.server import build_server
from tests.mcp.test_cluster import cluster_address
from tests.mcp.test_server import structured

__all__ = ["cluster_address"]  # the fixture, shared with test_cluster.py


def test_files_inside_and_outside_the_workdir_reach_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server_cwd, elsewhere = tmp_path / "server", tmp_path / "agent" / "k"
    for d in (server_cwd, elsewhere):
        d.mkdir(parents=True)
    (server_cwd / "ref.py").write_text("def ref(x):\n    return x\ndef make():\n    return (1,)\n")
    (elsewhere / "v1.py").write_text("from helper import f\ndef cand(x):\n    return f(x)\n")
    (elsewhere / "helper.py").write_text("def f(x):\n    return x\n")
    monkeypatch.chdir(server_cwd)  # no workdir: the server's directory, not the worker's
    request = ProfileRequest.model_validate(
        {
            "reference": "ref.py:ref",
            "candidates": [f"{elsewhere}/v1.py:cand"],
            "inputs": "ref.py:make",
            "configs": [{}],
            "backend": "events",
        }
    )
    resolved, folders = pack_request(request)
    assert resolved.workdir == str(server_cwd.resolve())
    assert [f.path for f in folders] == [str(server_cwd.resolve()), str(elsewhere.resolve())]
    assert all(f.zip_b64 for f in folders)

    worker_root = tmp_path / "worker"
    got = unpack_request(resolved, folders, worker_root)
    run = got.request
    assert run.reference == "ref.py:ref" and run.inputs == "ref.py:make"  # as written
    assert Path(run.workdir or "").parent == worker_root
    assert (Path(run.workdir or "") / "ref.py").is_file()
    cand_file = Path(run.candidates[0].rpartition(":")[0])
    assert cand_file.is_file() and (cand_file.parent / "helper.py").is_file()
    assert worker_root in cand_file.parents
    # What the worker's result says of its copies reads as the user's paths again.
    text = f'{{"Annotation": "{run.candidates[0]}", "File": "{cand_file}"}}'
    back = got.relabel(text)
    assert f"{elsewhere.resolve()}/v1.py:cand" in back and str(worker_root) not in back


@pytest.mark.anyio
async def test_a_dask_job_reads_files_beside_the_server_and_elsewhere_on_a_landlock_host(
    cluster_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server_cwd, elsewhere = tmp_path / "server", tmp_path / "agent" / "k"
    for d in (server_cwd, elsewhere):
        d.mkdir(parents=True)
    (server_cwd / "ref.py").write_text(
        "import numpy as np\n"
        "def ref(x):\n    return np.sort(x)\n"
        "def make(n=64):\n    return (np.random.rand(n),)\n"
    )
    (elsewhere / "v1.py").write_text("from helper import f\ndef cand(x):\n    return f(x)\n")
    (elsewhere / "helper.py").write_text("import numpy as np\ndef f(x):\n    return np.sort(x)\n")
    monkeypatch.chdir(server_cwd)
    cand = f"{elsewhere}/v1.py:cand"
    request = {
        "reference": "ref.py:ref",
        "candidates": [cand],
        "inputs": "ref.py:make",
        "configs": [{}],
        "backend": "events",
        "runs": 2,
        "check": {"seeds": 1},
    }
    async with Client(build_server(tmp_path / "store", executor=cluster_address)) as client:
        with anyio.fail_after(90):
            answer = structured(await client.call_tool("profile_candidates", {"request": request}))
    assert answer["status"] == "done", answer["message"]
    assert {r["Annotation"] for r in answer["rows"] if r["NumRuns"] == 2} == {"ref.py:ref", cand}
    assert [c["Passed"] for c in answer["correctness"]] == [True]
    if landlock_abi() > 0:
        assert answer["provenance"]["contestant_confined"] is True
