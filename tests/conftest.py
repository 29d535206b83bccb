"""Shared fixtures: the recorded ncu reports of tests/data/ncu (see tests/data/README.md), and
a temporary directory of a test's own for code that writes to the system's by design."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

NCU_DATA = Path(__file__).resolve().parent / "data" / "ncu"


@pytest.fixture(scope="session")
def manifest() -> dict[str, Any]:
    """The recorder's manifest: per case, what the child launched and what ncu saw."""
    path = NCU_DATA / "manifest.json"
    if not path.is_file():
        pytest.skip(f"recorded fixtures not present: {NCU_DATA} (see tests/data/README.md)")
    cases: dict[str, Any] = json.loads(path.read_text())["cases"]
    return cases


@pytest.fixture
def own_tempdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The system temporary directory, for this test and the processes it starts, is a
    folder of the test's own, removed after it; the host's device-lock folder is in its
    tmp_path.

    For what is left there by design: a `@kernel` job's files when no `output_prefix` is
    given (the user is told where), a server or worker killed with SIGKILL (it cannot remove
    its own), the device locks every server of a host shares. The folder sits directly in
    the system's (not in tmp_path), so the Unix sockets made in it fit their 107 bytes and
    stay in it (launch.socket_home falls back to /tmp for a longer TMPDIR)."""
    tmp = Path(tempfile.mkdtemp(prefix="pytest-own-"))
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("NSPY_MCP_LOCK_DIR", str(tmp_path / "device-locks"))
    yield tmp
    shutil.rmtree(tmp, ignore_errors=True)
