"""The optimisation loop as an Agent Skill served over MCP (`io.modelcontextprotocol/skills`).

Contract (SEP-2640, the Skills extension, as finalised: `specification/stable/skills.mdx` of
modelcontextprotocol/ext-skills; docs/skill.md):

- The skill's files live in `nspy_mcp/skill/<name>/`: `SKILL.md` (YAML frontmatter with
  `name` and `description`, then the instructions) and the files it links. That folder is
  also the Claude Code plugin's skill folder (`.claude-plugin/plugin.json`), and the
  `optimize_kernel` prompt (`prompts.py`) is its `SKILL.md` body: one text, three carriers.
- Every file is a resource `skill://<name>/<path>`, listed by `resources/list` and read by
  `resources/read`, so a client without the extension still sees ordinary resources;
  `SKILL.md` is listed as `text/markdown` with its frontmatter's name and description.
- The extension is declared under `capabilities.extensions` (the SDK's `Extension`; no
  `directoryRead`). `skills/list` answers every skill in one page; `skills/get` answers one
  by its `SKILL.md` URI, and -32602 for any other URI. An entry holds the URI, the
  frontmatter verbatim as JSON, and every file with the sha256 digest and size of the bytes
  `resources/read` serves.
- There is no `skill://index.json`: SEP-2640 v1 replaced that index resource with
  `skills/list`.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from mcp import MCPError
from mcp.client.session import ClientSession
from mcp.server.context import HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding, ResourceBinding
from mcp.server.mcpserver.resources import TextResource
from mcp.types import (
    INVALID_PARAMS,
    CacheableResult,
    PaginatedRequestParams,
    PaginatedResult,
    Request,
    RequestParams,
)
from pydantic import BaseModel

SKILLS_EXTENSION = "io.modelcontextprotocol/skills"
SKILLS_DIR = Path(__file__).with_name("skill")
"""Where the skills this server serves live, one folder per skill named as the skill."""
SKILL_FILE = "SKILL.md"
CACHE_TTL_MS = 3_600_000
"""How long a host may keep a listing or an entry: the files change only with the package,
and a new package means a restarted server. Public: every user gets the same skills."""
MAX_FILES, MAX_BYTES = 512, 16 * 1024 * 1024
"""SEP-2640's per-skill limits, which every host accepts."""

_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_FIELD = re.compile(r"^([a-z][a-z0-9-]*): (\S.*)$")
_RELATIVE_LINK = re.compile(r"\]\((?![a-z][a-z0-9+.-]*:|#|/)([^)\s]+)\)")
_YAML_INDICATORS = tuple("-?:,[]{}#&*!|>'\"%@`")
_YAML_NON_STRINGS = {"true", "false", "yes", "no", "on", "off", "null", "~"}


# -- the wire (SEP-2640's Skill, SkillResource and its two methods) -------------------------


class SkillResource(BaseModel):
    """One file of a skill: its URI, and the digest and size of the bytes served."""

    uri: str
    digest: str
    size: int


class SkillEntry(BaseModel):
    """One skill as `skills/list` and `skills/get` answer it."""

    uri: str
    frontmatter: dict[str, Any]
    resources: list[SkillResource]


class ListSkillsResult(PaginatedResult, CacheableResult):
    result_type: str = "complete"
    skills: list[SkillEntry]


class GetSkillParams(RequestParams):
    uri: str


class GetSkillResult(CacheableResult):
    result_type: str = "complete"
    skill: SkillEntry


class ListSkillsRequest(Request[PaginatedRequestParams, Literal["skills/list"]]):
    method: Literal["skills/list"] = "skills/list"


class GetSkillRequest(Request[GetSkillParams, Literal["skills/get"]]):
    method: Literal["skills/get"] = "skills/get"


# -- a skill on disk -----------------------------------------------------------------------


def parse_frontmatter(text: str) -> tuple[dict[str, str], str]:
    """`SKILL.md`'s frontmatter and body. Only `key: plain scalar` lines are accepted, the
    subset of YAML whose meaning is unambiguous without a YAML parser; anything else raises
    ValueError, so what a host parses with YAML is what `skills/list` sends."""
    head, sep, body = text.removeprefix("---\n").partition("\n---\n")
    if not text.startswith("---\n") or not sep:
        raise ValueError("SKILL.md must start with '---' frontmatter closed by '---'")
    fields: dict[str, str] = {}
    for line in head.splitlines():
        match = _FIELD.match(line)
        value = match.group(2) if match else ""
        if (
            match is None
            or value.startswith(_YAML_INDICATORS)
            or ": " in value
            or " #" in value
            or value.endswith((":", " "))
            or value.lower() in _YAML_NON_STRINGS
            or not re.search(r"[A-Za-z]", value)
        ):
            raise ValueError(f"frontmatter line is not 'key: plain text': {line!r}")
        fields[match.group(1)] = value
    return fields, body.lstrip("\n")


@dataclass(frozen=True)
class SkillFile:
    """A file of a skill: its path inside the skill's folder and its bytes."""

    path: str
    data: bytes

    @property
    def mime_type(self) -> str:
        return "text/markdown" if self.path.endswith(".md") else "text/plain"


@dataclass(frozen=True)
class Skill:
    """One skill read from its folder: frontmatter, instructions and every file."""

    name: str
    frontmatter: dict[str, str]
    body: str
    files: tuple[SkillFile, ...]

    @property
    def uri(self) -> str:
        return self.file_uri(SKILL_FILE)

    @property
    def description(self) -> str:
        return self.frontmatter["description"]

    def file_uri(self, path: str) -> str:
        return f"skill://{self.name}/{path}"

    def entry(self) -> SkillEntry:
        return SkillEntry(
            uri=self.uri,
            frontmatter=dict(self.frontmatter),
            resources=[
                SkillResource(
                    uri=self.file_uri(f.path),
                    digest="sha256:" + hashlib.sha256(f.data).hexdigest(),
                    size=len(f.data),
                )
                for f in self.files
            ],
        )

    def instructions(self) -> str:
        """The body with its relative links made `skill://` URIs, for use outside the
        skill's folder (the prompt fallback)."""
        return _RELATIVE_LINK.sub(lambda m: f"]({self.file_uri(m.group(1))})", self.body)


def load_skill(folder: Path) -> Skill:
    """The skill in `folder`, checked against the Agent Skills rules SEP-2640 relies on."""
    files = tuple(
        SkillFile(p.relative_to(folder).as_posix(), p.read_bytes())
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not any(part.startswith((".", "__")) for part in p.parts)
    )
    main = next((f for f in files if f.path == SKILL_FILE), None)
    if main is None:
        raise ValueError(f"{folder} has no {SKILL_FILE}")
    for f in files:
        f.data.decode("utf-8")  # served as text: the digest covers these very bytes
    frontmatter, body = parse_frontmatter(main.data.decode("utf-8"))
    name, description = frontmatter.get("name", ""), frontmatter.get("description", "")
    if name != folder.name or not _NAME.match(name) or len(name) > 64:
        raise ValueError(f"skill name {name!r} must be its folder's name, in kebab-case")
    if not 1 <= len(description) <= 1024:
        raise ValueError(f"skill {name}: description must be 1 to 1024 characters")
    if len(files) > MAX_FILES or sum(len(f.data) for f in files) > MAX_BYTES:
        raise ValueError(f"skill {name} is over SEP-2640's limits ({MAX_FILES} files, 16 MiB)")
    return Skill(name, frontmatter, body, files)


@functools.cache
def bundled_skills() -> tuple[Skill, ...]:
    """The skills shipped with nspy-mcp, read once."""
    return tuple(load_skill(d) for d in sorted(SKILLS_DIR.iterdir()) if d.is_dir())


def bundled_skill(name: str) -> Skill:
    return next(s for s in bundled_skills() if s.name == name)


# -- the server side -----------------------------------------------------------------------


class SkillsExtension(Extension):
    """Serves skills as `skill://` resources with `skills/list` and `skills/get`."""

    identifier = SKILLS_EXTENSION

    def __init__(self, skills: Sequence[Skill] | None = None) -> None:
        self._skills = tuple(bundled_skills() if skills is None else skills)

    def resources(self) -> Sequence[ResourceBinding]:
        return tuple(
            ResourceBinding(
                TextResource(
                    uri=skill.file_uri(f.path),
                    name=skill.name if f.path == SKILL_FILE else f"{skill.name}/{f.path}",
                    description=(
                        skill.description
                        if f.path == SKILL_FILE
                        else f"A file of the {skill.name} skill ({skill.uri})."
                    ),
                    mime_type=f.mime_type,
                    text=f.data.decode("utf-8"),
                )
            )
            for skill in self._skills
            for f in skill.files
        )

    def methods(self) -> Sequence[MethodBinding]:
        return (
            MethodBinding("skills/list", PaginatedRequestParams, self._list),
            MethodBinding("skills/get", GetSkillParams, self._get),
        )

    async def _list(self, ctx: ServerRequestContext[Any, Any], params: Any) -> HandlerResult:
        if isinstance(params, PaginatedRequestParams) and params.cursor is not None:
            # Every skill fits one page, so no cursor was ever handed out.
            raise MCPError(code=INVALID_PARAMS, message=f"unknown cursor {params.cursor!r}")
        return ListSkillsResult(
            skills=[s.entry() for s in self._skills],
            ttl_ms=CACHE_TTL_MS,
            cache_scope="public",
        )

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: Any) -> HandlerResult:
        uri = params.uri if isinstance(params, GetSkillParams) else ""
        skill = next((s for s in self._skills if s.uri == uri), None)
        if skill is None:
            served = ", ".join(s.uri for s in self._skills)
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"No skill is served at {uri}; this server's skills: {served}",
            )
        return GetSkillResult(skill=skill.entry(), ttl_ms=CACHE_TTL_MS, cache_scope="public")


# -- the client side (the Python SDK has no skills client) -----------------------------------


async def list_skills(session: ClientSession) -> ListSkillsResult:
    """One skills/list."""
    return await session.send_request(
        ListSkillsRequest(params=PaginatedRequestParams()), ListSkillsResult
    )


async def get_skill(session: ClientSession, uri: str) -> GetSkillResult:
    """One skills/get of the skill whose SKILL.md is at `uri`."""
    return await session.send_request(
        GetSkillRequest(params=GetSkillParams(uri=uri)), GetSkillResult
    )
