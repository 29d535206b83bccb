"""An agent's session on one server on a GPU host: all three backends in turn (tests/soak.py).

The session that broke in issue 41 (metric changes, `diagnose`, a staged job's ncu stage
after its cupti screen) and more: no request may end in a profiler_error from our own
processes, none may be left running, and no judge or contestant may outlive the client.
Run on the GPU host; the closing note quotes its log (printed with -s).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.soak import leftovers, run_session

pytestmark = [pytest.mark.gpu, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def own_tmp() -> Iterator[Path]:
    """The server's TMPDIR (judge homes, contestants' folders): short, so sockets fit."""
    tmp = Path(tempfile.mkdtemp(prefix="soak-"))
    yield tmp
    shutil.rmtree(tmp, ignore_errors=True)


async def test_an_agent_session_on_the_gpu_ends_every_request_as_it_should(
    tmp_path: Path, own_tmp: Path
) -> None:
    env = {"TMPDIR": str(own_tmp), "NSPY_MCP_LOCK_DIR": str(tmp_path / "locks")}
    log = await run_session(tmp_path, ("events", "cupti", "ncu"), gpu=True, env=env)
    print("\n".join(["", *log.lines]))
    assert log.requests >= 30, log.lines
    assert not log.problems, "\n".join(log.problems)
    assert not leftovers(own_tmp), leftovers(own_tmp)
