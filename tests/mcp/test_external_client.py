"""The server from outside: the official TypeScript MCP SDKs drive it over stdio.

`tools/external_client/check.mjs` calls every tool, resource and prompt with
@modelcontextprotocol/sdk 1.x (2025-11-25) and @modelcontextprotocol/client 2.x pinned to
each protocol era (2025-11-25, 2026-07-28); both SDKs validate every structured answer
against the advertised output schema. Needs node and `npm install` in that folder (network),
so it is `slow` and skips where either is missing, except where
``NSPY_REQUIRE_EXTERNAL_CLIENT`` is set (`.ci/run` installs them and sets it): there a
missing SDK fails the test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CLIENT_DIR = Path(__file__).resolve().parents[2] / "tools" / "external_client"
PACKAGES = ("@modelcontextprotocol/sdk", "@modelcontextprotocol/client")


@pytest.mark.slow
def test_the_typescript_sdks_find_no_schema_mismatch_in_either_era() -> None:
    absent = pytest.fail if os.environ.get("NSPY_REQUIRE_EXTERNAL_CLIENT") else pytest.skip
    node = shutil.which("node")
    if node is None:
        absent("node is not on PATH")
    missing = [p for p in PACKAGES if not (CLIENT_DIR / "node_modules" / p).is_dir()]
    if missing:
        absent(f"{missing} not installed: run `npm install` in {CLIENT_DIR} (needs network)")
    done = subprocess.run(
        [node, "check.mjs", sys.executable],
        cwd=CLIENT_DIR,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    eras = [line for line in done.stdout.splitlines() if "schema mismatch" in line]
    assert len(eras) == 3 and all(" 0 failure(s), 0 schema" in line for line in eras), eras
    assert "protocol 2026-07-28" in done.stdout and "protocol 2025-11-25" in done.stdout
