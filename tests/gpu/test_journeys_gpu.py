"""A user's first steps on a GPU host: the demo from another folder, and an agent's MCP
session whose kernels live in a folder of their own (absolute paths, no workdir), with torch,
and with cupy or numpy where torch is not installed.

"Not installed" is made real for every process of the session: a `sitecustomize` on
PYTHONPATH sets ``sys.modules["torch"] = None``, so ``import torch`` fails and
``importlib.util.find_spec("torch")`` finds nothing, in the server, the judge and the
contestant alike.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

pytestmark = [pytest.mark.gpu, pytest.mark.anyio]

KERNELS = {
    "torch_ref.py": """
        import torch
        def softmax(x):
            return torch.softmax(x, dim=-1)
        def make_inputs(rows=4096, cols=1024):
            return (torch.randn(rows, cols, device="cuda"),)
        """,
    "torch_v1.py": """
        import torch
        def softmax(x):
            e = torch.exp(x - x.amax(dim=-1, keepdim=True))
            return e / e.sum(dim=-1, keepdim=True)
        """,
    "cupy_ref.py": """
        import cupy as cp
        def softmax(x):
            e = cp.exp(x - x.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)
        def make_inputs(rows=4096, cols=1024):
            return (cp.random.rand(rows, cols, dtype=cp.float32),)
        """,
    "cupy_v1.py": """
        import cupy as cp
        from cupy_helpers import normalize
        def softmax(x):
            return normalize(cp.exp(x - x.max(axis=-1, keepdims=True)))
        """,
    "cupy_helpers.py": """
        def normalize(e):
            return e / e.sum(axis=-1, keepdims=True)
        """,
    "np_v1.py": """
        import numpy as np
        def softmax(x):
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            return e * (1.0 / e.sum(axis=-1, keepdims=True))
        """,
    "np_ref.py": """
        import numpy as np
        def softmax(x):
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)
        def make_inputs(rows=256, cols=256):
            return (np.random.rand(rows, cols).astype(np.float32),)
        """,
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def kernels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("agent-kernels")
    for name, text in KERNELS.items():
        (folder / name).write_text(textwrap.dedent(text))
    return folder


def _env(extra_path: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(extra_path), env.get("PYTHONPATH", "")) if p
        )
    return env


def _no_torch(tmp_path: Path) -> Path:
    site = tmp_path / "no-torch"
    site.mkdir()
    (site / "sitecustomize.py").write_text('import sys\nsys.modules["torch"] = None\n')
    return site


def _answer(result: CallToolResult) -> dict[str, Any]:
    if result.is_error or result.structured_content is None:
        raise AssertionError(" ".join(getattr(c, "text", "") for c in result.content))
    return dict(result.structured_content)


async def _session(
    tmp_path: Path, requests: list[dict[str, Any]], site: Path | None
) -> list[dict[str, Any]]:
    cwd = tmp_path / "server-cwd"
    cwd.mkdir(exist_ok=True)
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nspy_mcp", "serve", "--store", str(tmp_path / "store")],
        env=_env(site),
        cwd=str(cwd),
    )
    answers = []
    async with Client(server) as client:
        for request in requests:
            with anyio.fail_after(240):
                got = _answer(await client.call_tool("profile_candidates", {"request": request}))
            answers.append(got)
            print(f"\n[{request['backend']} {request['candidates']}] {got['message']}")
            for row in got["rows"]:
                print(
                    f"  {row['Annotation']} {row['Metric']} {row['AvgValue']} {row['Unit']} "
                    f"n={row['NumRuns']} {row['Trust']} {row['Reasons']}"
                )
            print(f"  confined={got['provenance']['contestant_confined']}")
    return answers


def _request(k: Path, prefix: str, backend: str, cand: str = "v1") -> dict[str, Any]:
    return {
        "reference": f"{k}/{prefix}_ref.py:softmax",
        "candidates": [f"{k}/{prefix}_{cand}.py:softmax"],
        "inputs": f"{k}/{prefix}_ref.py:make_inputs",
        "configs": [{}],
        "backend": backend,
        "runs": 3,
        "kernels": {"combine": "sum"},  # composed softmaxes launch several kernels a call
    }


def _assert_trusted(answer: dict[str, Any]) -> None:
    assert answer["status"] == "done", answer["message"]
    assert all(c["Passed"] for c in answer["correctness"]), answer["correctness"]
    for row in answer["rows"]:
        assert row["NumRuns"] == 3 and row["Trust"] in ("ok", "noisy"), row
    assert answer["provenance"]["contestant_confined"] is True


def test_the_demo_runs_from_another_folder_and_no_row_is_suspicious(tmp_path: Path) -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "nspy_mcp", "demo"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    print(ran.stdout[-2000:])
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "suspicious" not in ran.stdout, ran.stdout


async def test_torch_kernels_elsewhere_under_ncu_and_events(kernels: Path, tmp_path: Path) -> None:
    answers = await _session(
        tmp_path,
        [_request(kernels, "torch", "ncu"), _request(kernels, "torch", "events")],
        site=None,
    )
    for answer in answers:
        _assert_trusted(answer)


async def test_cupy_and_numpy_kernels_where_torch_is_not_installed(
    kernels: Path, tmp_path: Path
) -> None:
    answers = await _session(
        tmp_path,
        [
            _request(kernels, "cupy", "events"),
            _request(kernels, "cupy", "ncu"),
            _request(kernels, "np", "events"),
        ],
        site=_no_torch(tmp_path),
    )
    for answer in answers:
        _assert_trusted(answer)
