"""Errors as the agent reads them: engine errors and refused arguments, class first.

Every text starts with the stable error class (`invalid_request: ...`), names the field and
says what to change. Schema (pydantic) errors go through one formatter,
`format_validation_error`, so no raw pydantic dump or errors.pydantic.dev link reaches an
agent; `agent_text` turns whatever the SDK raised into that form. Unknown arguments are
refused here by a middleware, because the SDK would silently drop them and the agent would
never learn its argument was ignored.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult, TextContent
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.store.result_store import CorruptResultError, validate_result_id

RESULT_ID_FIELDS = frozenset({"result_id", "cursor"})
"""Fields holding result ids: a malformed one gets the store's friendly message, not a regex."""

_JSON_KIND = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "list_type": "an array",
}
"""Pydantic type-error codes and the JSON value the field wants instead."""

_LIMITS = {
    "too_short": ("has too few items", "give at least {}", "min_length"),
    "too_long": ("has too many items", "give at most {}", "max_length"),
    "string_too_short": ("is too short", "give at least {} character(s)", "min_length"),
    "string_too_long": ("is too long", "give at most {} characters", "max_length"),
    "greater_than": ("is too small", "use a value > {}", "gt"),
    "greater_than_equal": ("is too small", "use a value >= {}", "ge"),
    "less_than": ("is too large", "use a value < {}", "lt"),
    "less_than_equal": ("is too large", "use a value <= {}", "le"),
}
"""Pydantic limit-error codes: the problem, and the fix with the limit from the error's ctx."""


def tool_error(err: NsightCoreError) -> ToolError:
    """An engine error as the agent reads it: class first, then what to change."""
    text = f"{err.error_class.value}: {err.message}"
    if err.hint:
        text += f". To fix: {err.hint}"
    return ToolError(text)


def format_validation_error(
    err: ValidationError, *, tool: str, schema: Mapping[str, Any] | None = None
) -> str:
    """The one formatter for schema errors: class first, then per field its problem and fix.

    `schema` (the tool's input schema) lets an unknown field be answered with the nearest
    known name. Values are quoted only briefly: they are the caller's data.
    """
    problems = [_problem(e, schema) for e in err.errors(include_url=False)]
    head = f"{ErrorClass.INVALID_REQUEST.value}: "
    if len(problems) == 1:
        return f"{head}{problems[0]} (tool {tool})"
    listed = "; ".join(f"({i}) {p}" for i, p in enumerate(problems, 1))
    return f"{head}{len(problems)} problems in the arguments of {tool}: {listed}"


def _where(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "the arguments"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _problem(e: ErrorDetails, schema: Mapping[str, Any] | None) -> str:
    kind, loc, ctx = e["type"], tuple(e["loc"]), e.get("ctx") or {}
    field = _where(loc)
    value = e.get("input")
    if kind == "missing":
        return f"{field} is required. To fix: add it"
    if kind == "extra_forbidden":
        known = _known_fields(schema, loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), known, n=1) if known else []
        fix = f"did you mean {close[0]!r}?" if close else "remove it"
        allowed = f" ({_where(loc[:-1])} takes {known})" if known else ""
        return f"{field} is not a known field{allowed}. To fix: {fix}"
    if kind in _JSON_KIND:
        want = _JSON_KIND[kind]
        got = f"got {type(value).__name__} {_short(value)}"
        fix = f"pass {want}"
        if isinstance(value, str) and kind not in ("string_type",):
            fix += " without quotes (strings are not converted)"
        return f"{field} must be {want}, {got}. To fix: {fix}"
    if kind in ("literal_error", "enum"):
        return f"{field} is {_short(value)}. To fix: use one of {ctx.get('expected')}"
    if kind in _LIMITS:
        problem, fix, key = _LIMITS[kind]
        limit = ctx.get(key, "?")
        shown = "" if kind in ("too_short", "too_long") else f" ({_short(value)})"
        return f"{field} {problem}{shown}. To fix: {fix.format(limit)}"
    if kind == "string_pattern_mismatch":
        if loc and loc[-1] in RESULT_ID_FIELDS and isinstance(value, str):
            try:
                validate_result_id(value)
            except NsightCoreError as bad:
                return f"{field}: {bad.message}. To fix: {bad.hint}"
        return f"{field} is {_short(value)}, not of the expected form. To fix: see the field's description"
    if kind in ("value_error", "assertion_error"):
        # The project's validators word their messages "problem; fix".
        message = str(ctx.get("error") or e["msg"]).removeprefix("Value error, ")
        problem, sep, fix = message.partition("; ")
        text = f"{problem}. To fix: {fix}" if sep else message
        return f"{field}: {text}" if loc else text
    return f"{field}: {e['msg']}"


def _known_fields(schema: Mapping[str, Any] | None, loc: tuple[int | str, ...]) -> list[str]:
    """Property names of the object at `loc` in a JSON Schema (following $ref), if any."""
    if schema is None:
        return []
    defs = schema.get("$defs", {})
    node: Mapping[str, Any] = schema
    for part in (*loc, None):
        while "$ref" in node:
            node = defs.get(str(node["$ref"]).rsplit("/", 1)[-1], {})
        for key in ("anyOf", "oneOf"):
            options = [o for o in node.get(key, []) if "$ref" in o or "properties" in o]
            if options:
                node = options[0]
                while "$ref" in node:
                    node = defs.get(str(node["$ref"]).rsplit("/", 1)[-1], {})
        if part is None:
            break
        if isinstance(part, int):
            node = node.get("items", {})
        else:
            node = node.get("properties", {}).get(part, {})
    return sorted(node.get("properties", {}))


def agent_text(
    tool: str,
    exc: ToolError,
    schema: Mapping[str, Any] | None = None,
    tools: Sequence[str] = (),
) -> str:
    """What the SDK raised for a tool call, as the agent reads it: class first, no SDK prefix.

    `tools`, the server's tool names, lets a misspelt tool name be answered with the
    nearest ones: an agent that guessed a name should not need a tools/list round trip."""
    cause = exc.__cause__
    if isinstance(exc, UnexpectedToolError):
        return (
            f"{ErrorClass.CRASHED.value}: tool {tool} failed inside the nspy-mcp server. "
            "To fix: call it again; if it repeats, report it with the server's stderr log"
        )
    if isinstance(cause, ValidationError):
        return format_validation_error(cause, tool=tool, schema=schema)
    if isinstance(cause, ToolError):
        return str(cause)
    text = str(exc).removeprefix(f"Error executing tool {tool}: ")
    if text.startswith("Unknown tool"):
        return unknown_tool_text(tool, tools)
    return text


def unknown_tool_text(tool: str, tools: Sequence[str]) -> str:
    """A call of a tool this server does not have: the nearest names, then all of them."""
    head = f"{ErrorClass.INVALID_REQUEST.value}: unknown tool {tool!r}"
    known = sorted(tools)
    if not known:
        return f"{head}. To fix: call tools/list for the tools this server has"
    close = difflib.get_close_matches(tool, known, n=3, cutoff=0.5)
    fix = f"did you mean {' or '.join(map(repr, close))}?" if close else "call one of them"
    return f"{head}; this server's tools are {known}. To fix: {fix}"


def corrupt_error(err: CorruptResultError) -> ToolError:
    """A stored result that cannot be read back: say so, and where its files were left."""
    return ToolError(
        f"{ErrorClass.CRASHED.value}: {err}. This stored result cannot be read back. To fix: "
        f"run the job again (the directory {err.path.parent} is left for inspection)"
    )


def reject_unknown_arguments(server: MCPServer[Any]) -> Any:
    """Middleware: a tools/call with arguments the tool does not take is refused, by name."""
    allowed: dict[str, list[str]] = {}
    schemas: dict[str, Mapping[str, Any]] = {}

    async def middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        params = ctx.params
        if ctx.method == "tools/call" and isinstance(params, Mapping):
            name, args = params.get("name"), params.get("arguments")
            if not allowed:
                for tool in await server.list_tools():
                    allowed[tool.name] = sorted(tool.input_schema.get("properties", {}))
                    schemas[tool.name] = tool.input_schema
            if isinstance(name, str) and name in allowed and isinstance(args, Mapping):
                known = allowed[name]
                extra = sorted(str(k) for k in args if k not in known)
                if extra:
                    return unknown_arguments_result(name, extra, known, schemas.get(name))
        return await call_next(ctx)

    return middleware


def unknown_arguments_result(
    tool: str, extra: list[str], known: list[str], schema: Mapping[str, Any] | None = None
) -> CallToolResult:
    """The error answer naming the unknown arguments, with the closest known name for each.

    With the tool's `schema`, an argument that belongs one level down (a top-level `wait`
    or `runs` beside profile_candidates' `request`) is pointed at its place there, since
    that mix-up, not a typo, is the usual cause."""
    hints = [h for h in (_argument_hint(arg, known, schema) for arg in extra) if h]
    text = f"invalid_request: unknown argument(s) {extra} for tool {tool}; it takes {known}"
    text += f". To fix: {'; '.join(hints)}" if hints else ". To fix: remove them"
    return CallToolResult(is_error=True, content=[TextContent(type="text", text=text)])


def _argument_hint(arg: str, known: list[str], schema: Mapping[str, Any] | None) -> str:
    close = difflib.get_close_matches(arg, known, n=1)
    if close:
        return f"{arg!r} -> did you mean {close[0]!r}?"
    for outer in known:
        inner = _known_fields(schema, (outer,))
        match = [arg] if arg in inner else difflib.get_close_matches(arg, inner, n=1)
        if match:
            return (
                f"{arg!r} -> did you mean {outer}.{match[0]}? It goes inside {outer}: "
                f'{{"{outer}": {{..., "{match[0]}": ...}}}}'
            )
    return ""
