"""The optimize-kernel skill over MCP (SEP-2640), its prompt fallback and the Claude Code plugin.

Read through the real MCP client, as a host that implements the skills extension does:
`skills/list` (the index), then `resources/read` of what an entry lists, checked against
the entry's digests, sizes and frontmatter; in memory (both protocol eras) and over stdio,
with the server started by the command the plugin manifest gives.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tomllib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.types import INVALID_PARAMS, PaginatedRequestParams, TextResourceContents

from nspy_mcp.server import build_server
from nspy_mcp.skills import (
    MAX_BYTES,
    MAX_FILES,
    SKILLS_DIR,
    SKILLS_EXTENSION,
    ListSkillsRequest,
    ListSkillsResult,
    SkillEntry,
    bundled_skill,
    get_skill,
    list_skills,
    load_skill,
    parse_frontmatter,
)
from nspy_mcp.version import __version__

pytestmark = pytest.mark.anyio

MODES = pytest.mark.parametrize("mode", ["auto", "legacy"])
REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / ".claude-plugin"
SKILL_URI = "skill://optimize-kernel/SKILL.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")


@asynccontextmanager
async def connected(store: Path, mode: str = "auto") -> AsyncIterator[Client]:
    async with Client(build_server(store), mode=mode) as client:
        yield client


async def read_text(client: Client, uri: str) -> tuple[str, str | None]:
    """A resource's text and MIME type."""
    (content,) = (await client.read_resource(uri)).contents
    assert isinstance(content, TextResourceContents), uri
    return content.text, content.mime_type


async def load_verified(client: Client, entry: SkillEntry) -> str:
    """What a host does before a skill enters the model's context: read every listed file,
    check its size and digest, and the SKILL.md frontmatter against the entry. The
    SKILL.md text."""
    texts: dict[str, str] = {}
    for file in entry.resources:
        text, _ = await read_text(client, file.uri)
        data = text.encode("utf-8")
        assert len(data) == file.size, file.uri
        assert "sha256:" + hashlib.sha256(data).hexdigest() == file.digest, file.uri
        texts[file.uri] = text
    frontmatter, _ = parse_frontmatter(texts[entry.uri])
    assert frontmatter == entry.frontmatter
    return texts[entry.uri]


# -- the index and what it leads to --------------------------------------------------------


@MODES
async def test_the_skill_index_leads_to_a_verified_skill_md(mode: str, tmp_path: Path) -> None:
    async with connected(tmp_path, mode) as client:
        listing = await list_skills(client.session)
        (entry,) = listing.skills
        skill_md = await load_verified(client, entry)
        listed = {f.uri for f in entry.resources}
        for link in LINK.findall(skill_md):  # relative links resolve against the skill's root
            assert f"skill://optimize-kernel/{link}" in listed, link
            await read_text(client, f"skill://optimize-kernel/{link}")
    assert entry.uri == SKILL_URI
    assert entry.frontmatter["name"] == entry.uri.split("/")[-2] == "optimize-kernel"
    assert 1 <= len(entry.frontmatter["description"]) <= 1024
    assert listed >= {SKILL_URI, "skill://optimize-kernel/references/backends.md"}
    assert listing.result_type == "complete" and listing.next_cursor is None
    assert listing.ttl_ms > 0 and listing.cache_scope == "public"


async def test_the_extension_is_declared_beside_the_resources_capability(
    tmp_path: Path,
) -> None:
    async with connected(tmp_path) as client:  # 2026-07-28: server/discover
        capabilities = client.server_capabilities
    assert capabilities.extensions is not None
    assert capabilities.extensions[SKILLS_EXTENSION] == {}  # no directoryRead
    assert capabilities.resources is not None


@MODES
async def test_skills_get_answers_the_listed_entry_and_refuses_any_other_uri(
    mode: str, tmp_path: Path
) -> None:
    async with connected(tmp_path, mode) as client:
        (listed,) = (await list_skills(client.session)).skills
        got = await get_skill(client.session, SKILL_URI)
        codes = []
        for uri in (
            "skill://optimize-kernel/references/backends.md",  # a file, not a skill
            "skill://refunds/SKILL.md",
        ):
            with pytest.raises(MCPError) as refused:
                await get_skill(client.session, uri)
            codes.append(refused.value.code)
        with pytest.raises(MCPError) as bad_cursor:
            await client.session.send_request(
                ListSkillsRequest(params=PaginatedRequestParams(cursor="page-2")),
                ListSkillsResult,
            )
    assert got.skill == listed and got.result_type == "complete"
    assert codes == [INVALID_PARAMS, INVALID_PARAMS]
    assert bad_cursor.value.code == INVALID_PARAMS


async def test_skill_files_are_ordinary_resources_for_clients_without_the_extension(
    tmp_path: Path,
) -> None:
    async with connected(tmp_path) as client:
        resources = {r.uri: r for r in (await client.list_resources()).resources}
        text, mime = await read_text(client, SKILL_URI)
    skill_md = resources[SKILL_URI]
    frontmatter, _ = parse_frontmatter(text)
    assert mime == skill_md.mime_type == "text/markdown"
    assert skill_md.name == frontmatter["name"]
    assert skill_md.description == frontmatter["description"]
    assert {u for u in resources if u.startswith("skill://")} == {
        f"skill://optimize-kernel/{f.path}" for f in bundled_skill("optimize-kernel").files
    }


# -- the prompt fallback -------------------------------------------------------------------


@MODES
async def test_the_prompt_carries_the_skills_instructions_with_readable_links(
    mode: str, tmp_path: Path
) -> None:
    async with connected(tmp_path, mode) as client:
        prompt = await client.get_prompt(
            "optimize_kernel", {"reference": "k.py:ref", "goal": "halve the time"}
        )
        content = prompt.messages[0].content
        text = getattr(content, "text", "")
        links = [u for u in LINK.findall(text)]
        for uri in links:
            await read_text(client, uri)
        skill_md, _ = await read_text(client, SKILL_URI)
    _, body = parse_frontmatter(skill_md)
    assert text.startswith("Goal: halve the time. Reference: k.py:ref;")
    assert links and all(u.startswith("skill://optimize-kernel/references/") for u in links)
    # One text: the prompt is SKILL.md's body, only its links made absolute.
    assert LINK.sub("]()", text.partition("\n\n")[2]) == LINK.sub("]()", body)


# -- the skill's files ---------------------------------------------------------------------


def test_the_skill_stays_compact_and_within_sep_2640s_limits() -> None:
    skill = bundled_skill("optimize-kernel")
    sizes = {f.path: len(f.data) for f in skill.files}
    assert sizes["SKILL.md"] < 8 * 1024
    assert len(sizes) <= MAX_FILES and sum(sizes.values()) <= MAX_BYTES


def test_skill_md_frontmatter_reads_the_same_with_a_yaml_parser() -> None:
    yaml = pytest.importorskip("yaml")
    text = (SKILLS_DIR / "optimize-kernel" / "SKILL.md").read_text()
    head = text.removeprefix("---\n").partition("\n---\n")[0]
    assert yaml.safe_load(head) == parse_frontmatter(text)[0]


@pytest.mark.parametrize(
    "line",
    [
        "description: Use when: profiling",  # a nested mapping in YAML
        "description: 'quoted'",
        "description: fast # and a comment",
        "license: true",
        "version: 1.0",
        "  name: indented",
    ],
)
def test_frontmatter_that_yaml_would_read_otherwise_is_refused(line: str) -> None:
    with pytest.raises(ValueError, match="frontmatter"):
        parse_frontmatter(f"---\nname: x\n{line}\n---\nbody\n")


def test_a_skill_whose_name_is_not_its_folders_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "other-name"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\nname: optimize-kernel\ndescription: d\n---\nbody\n")
    with pytest.raises(ValueError, match="folder"):
        load_skill(folder)


# -- the Claude Code plugin ----------------------------------------------------------------


def _json(path: Path) -> dict[str, Any]:
    value = json.loads(path.read_text())
    assert isinstance(value, dict)
    return value


def test_the_plugin_manifest_runs_nspy_mcp_serve_and_ships_the_skill_folder() -> None:
    manifest = _json(PLUGIN / "plugin.json")
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", manifest["name"])
    assert manifest["version"] == __version__
    skills = REPO / manifest["skills"]
    assert manifest["skills"].startswith("./") and skills.resolve() == SKILLS_DIR.resolve()
    folders = [d for d in skills.iterdir() if d.is_dir() and not d.name.startswith("__")]
    assert [load_skill(d).name for d in folders] == ["optimize-kernel"]
    (server,) = manifest["mcpServers"].values()
    assert [server["command"], *server["args"]] == ["nspy-mcp", "serve"]
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert server["command"] in scripts


def test_the_marketplace_offers_the_plugin_at_the_repository_root() -> None:
    marketplace = _json(PLUGIN / "marketplace.json")
    assert marketplace["owner"]["name"]
    (plugin,) = marketplace["plugins"]
    root = (REPO / plugin["source"]).resolve()
    assert plugin["name"] == _json(root / ".claude-plugin" / "plugin.json")["name"]


async def test_the_plugins_server_command_serves_the_skill_over_stdio(tmp_path: Path) -> None:
    (server,) = _json(PLUGIN / "plugin.json")["mcpServers"].values()
    command = Path(sys.executable).with_name(server["command"])  # this venv's nspy-mcp
    if not command.exists():
        pytest.skip(f"{command} is not installed (pip install -e .)")
    params = StdioServerParameters(
        command=str(command),
        args=server["args"],
        env={**os.environ, "NSPY_MCP_STORE": str(tmp_path), "NSPY_MCP_STANDBY_AT_START": "0"},
    )
    with anyio.fail_after(60):
        async with Client(params) as client:
            (entry,) = (await list_skills(client.session)).skills
            skill_md = await load_verified(client, entry)
            prompt = await client.get_prompt("optimize_kernel", {})
            extensions = client.server_capabilities.extensions or {}
    on_disk = (SKILLS_DIR / "optimize-kernel" / "SKILL.md").read_bytes()
    assert skill_md.encode("utf-8") == on_disk  # the plugin's file is the one served
    assert SKILLS_EXTENSION in extensions
    assert prompt.messages
