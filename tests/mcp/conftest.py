"""Fixtures every MCP test shares."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def private_device_locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test gets its own device lock files, so other processes on this host never wait."""
    monkeypatch.setenv("NSPY_MCP_LOCK_DIR", str(tmp_path / "device-locks"))
