"""Counters denied for real: the server run as an unprivileged user on a GPU host whose
driver keeps performance counters for administrators (docs/backends.md#counters-denied).

The GPU hosts this project is lent run as root, where counters are open; the driver's
``RmProfilingAdminOnly: 1`` still closes them to any other user. So the server is started
over stdio as user ``nobody`` (``setpriv``, which only drops privileges), and through the
real MCP client: ``check_environment(deep=true)`` must find the counters denied by ncu's own
one-kernel test and name the fix, and a request naming ncu must be answered by cupti or
events with every number labelled. Nothing here changes a driver setting. Skipped where the
driver lets every user read counters, where this process is not root (no user to become),
or without ``setpriv``.

Run on a GPU host: ``python -m pytest -m gpu -s tests/gpu/test_counters_denied_gpu.py``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from nsight_core.host.counters import COUNTERS_FIX, read_profiling_admin_only
from nsight_core.request import DEFAULT_METRIC
from tests.mcp.test_counters_denied_mcp import CANDIDATE
from tests.mcp.test_server import structured

pytestmark = [pytest.mark.gpu, pytest.mark.anyio]

NOBODY = 65534
DRAM = "dram__bytes_read.sum"
REFERENCE = """
import torch


def make_inputs(rows, cols):
    return (torch.randn(rows, cols, device="cuda"),)


def softmax(x):
    return torch.softmax(x, dim=1)
"""


def _open_to_others(path: Path) -> bool:
    """Whether a user who owns nothing here can reach ``path``: every folder on the way
    searchable by others."""
    return all(p.stat().st_mode & 0o001 for p in [path, *path.parents] if p.is_dir())


def _unprivileged_server(work: Path) -> StdioServerParameters:
    if read_profiling_admin_only() != 1:
        pytest.skip("this driver lets every user read counters (RmProfilingAdminOnly != 1)")
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to start the server as an unprivileged user")
    code = [Path(p) for p in sys.path if p and Path(p).is_dir()] + [Path(__file__).parents[2]]
    closed = [str(p) for p in code if not _open_to_others(p)]
    if closed:
        pytest.skip(f"the code is out of an unprivileged user's reach: {closed[:3]}")
    if not _open_to_others(work.parent):
        pytest.skip(f"{work.parent} is out of an unprivileged user's reach")
    for sub in ("home", "cache", "store"):
        (work / sub).mkdir()
    for path in (work, *work.iterdir()):
        os.chown(path, NOBODY, NOBODY)
    env = {
        **os.environ,
        "HOME": str(work / "home"),
        "TMPDIR": str(work / "home"),
        "NSPY_CACHE_DIR": str(work / "cache"),
        "TRITON_CACHE_DIR": str(work / "home" / "triton"),
    }
    drop = [f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
    return StdioServerParameters(
        command=setpriv,
        args=[*drop, sys.executable, "-m", "nspy_mcp", "serve", "--store", str(work / "store")],
        env=env,
        cwd=str(work),
    )


def _request(work: Path) -> dict[str, Any]:
    for name, code in (("ref.py", REFERENCE), ("cand.py", CANDIDATE)):
        (work / name).write_text(textwrap.dedent(code).lstrip())
        os.chown(work / name, NOBODY, NOBODY)
    return {
        "reference": "ref.py:softmax",
        "candidates": ["cand.py:softmax"],
        "inputs": "ref.py:make_inputs",
        "workdir": str(work),
        "configs": [{"rows": 4096, "cols": 1024}],
        "backend": "ncu",
        "metrics": [DEFAULT_METRIC, DRAM],
        "runs": 5,
        "wait_s": 600,
    }


@pytest.fixture
def work() -> Iterator[Path]:
    """A folder the unprivileged user owns (pytest's own lies under a root-only folder)."""
    top = Path(tempfile.mkdtemp(prefix="nspy-nobody-"))
    top.chmod(0o755)
    try:
        yield top / "nobody"
    finally:
        shutil.rmtree(top, ignore_errors=True)


async def test_an_unprivileged_user_gets_labelled_numbers_from_a_backend_without_counters(
    work: Path,
) -> None:
    work.mkdir()
    params = _unprivileged_server(work)
    async with Client(params) as client:
        with anyio.fail_after(900):
            env = structured(await client.call_tool("check_environment", {"deep": True}))
            done = structured(
                await client.call_tool("profile_candidates", {"request": _request(work)})
            )
    counters = env["counters"]
    ncu = next(b for b in env["backends"] if b["name"] == "ncu")
    print(f"\ncounters as nobody: {counters}\nncu: {ncu}\nremediation: {env['remediation']}")
    assert counters["deep_test"] == "permission_denied", counters
    assert not ncu["available"]
    assert any(COUNTERS_FIX in fix for fix in env["remediation"])

    assert done["status"] == "done", done["message"]
    answered = done["provenance"]["backend"]
    print(f"answered by {answered}: {done['message'][:300]}")
    assert answered in ("cupti", "events")
    for row in done["rows"]:
        print(f"  {row['Annotation']:18} {row['Metric']:28} {row['AvgValue']} {row['Trust']}")
        if row["Metric"] == DRAM:
            assert row["AvgValue"] is None and row["ErrorClass"] == "permission_denied"
        else:
            assert row["AvgValue"] is not None and row["Backend"] == answered
            assert any(r.startswith("ncu was asked for") for r in row["Reasons"])
