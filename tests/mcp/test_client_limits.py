"""The limits of the hosts agents use, measured through the real client (issue 45, item 2).

Claude Code cuts a server's instructions and each tool's description at 2 KB and moves a
tool call past 2 minutes into a background task of its own; so the text an agent reads
must fit, and a call must answer, with a `result_id` to come back with, before then. What
`tools/list` weighs is printed beside its budget (tests/mcp/test_tool_list.py holds it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from nsight_core.request import ProfileRequest
from nspy_mcp.server import build_server

pytestmark = pytest.mark.anyio

TEXT_LIMIT = 2048
"""Bytes of server instructions and of each tool description a host shows in full."""
BACKGROUND_AFTER_S = 120.0
"""Claude Code moves a tool call that runs longer into a background task."""


async def test_instructions_descriptions_and_default_waits_fit_the_hosts(tmp_path: Path) -> None:
    async with Client(build_server(tmp_path)) as client:
        instructions = client.instructions
        listed = await client.list_tools()
    assert instructions and len(instructions.encode()) <= TEXT_LIMIT
    tools: dict[str, Any] = {
        t.name: t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in listed.tools
    }
    sizes = {name: len(t["description"].encode()) for name, t in tools.items()}
    assert all(size <= TEXT_LIMIT for size in sizes.values()), sizes
    # The longest a call waits unless told otherwise: it answers before the host gives up.
    wait = ProfileRequest.model_fields["wait_s"].default
    assert 0 < wait < BACKGROUND_AFTER_S
    read = tools["read_results"]["inputSchema"]["properties"]["wait_s"]
    assert read.get("default", 0.0) < BACKGROUND_AFTER_S
    total = len(json.dumps({"tools": list(tools.values())}, separators=(",", ":")).encode())
    sys.stdout.write(
        f"\ninstructions {len(instructions.encode())} B; descriptions {sizes}; "
        f"tools/list {total} B; profile_candidates waits {wait:.0f} s by default\n"
    )
