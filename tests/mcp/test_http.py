"""`nspy-mcp serve --http` says where it serves, and a client reaches it there."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client

pytestmark = pytest.mark.anyio


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_the_http_server_prints_its_url_and_a_client_lists_the_tools_there(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "NSPY_MCP_STORE": str(tmp_path / "store"), "NSPY_MCP_STANDBY": "0"}
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "nspy_mcp", "serve", "--http", "--port", str(port)],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        assert server.stderr is not None
        line = await anyio.to_thread.run_sync(server.stderr.readline)
        found = re.search(r"at (http://\S+)", line)
        assert found is not None, line
        url = found.group(1)
        assert url == f"http://127.0.0.1:{port}/mcp"
        with anyio.fail_after(60):
            while True:  # the URL is printed just before the HTTP server binds
                try:
                    async with Client(url) as client:
                        tools = {t.name for t in (await client.list_tools()).tools}
                    break
                except Exception:
                    await anyio.sleep(0.2)
        assert {"profile_candidates", "read_results"} <= tools
    finally:
        server.terminate()
        out, _ = server.communicate(timeout=30)
    assert out == ""  # stdout stays clean
