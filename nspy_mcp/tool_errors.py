"""Errors as the agent reads them: engine errors and refused arguments, class first.

Every text starts with the stable error class (`invalid_request: ...`) and says what to
change. Unknown arguments are refused here by a middleware, because the SDK would
silently drop them and the agent would never learn its argument was ignored.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent

from nsight_core.errors import NsightCoreError
from nsight_core.store import CorruptResultError


def tool_error(err: NsightCoreError) -> ToolError:
    """An engine error as the agent reads it: class first, then what to change."""
    text = f"{err.error_class.value}: {err.message}"
    if err.hint:
        text += f". To fix: {err.hint}"
    return ToolError(text)


def corrupt_error(err: CorruptResultError) -> ToolError:
    """A stored result that cannot be read back: say so, and where its files were left."""
    return ToolError(
        f"{err}. This stored result cannot be read back; run the job again "
        f"(the directory {err.path.parent} is left for inspection)"
    )


def reject_unknown_arguments(server: MCPServer[Any]) -> Any:
    """Middleware: a tools/call with arguments the tool does not take is refused, by name."""
    allowed: dict[str, list[str]] = {}

    async def middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        params = ctx.params
        if ctx.method == "tools/call" and isinstance(params, Mapping):
            name, args = params.get("name"), params.get("arguments")
            if not allowed:
                for tool in await server.list_tools():
                    allowed[tool.name] = sorted(tool.input_schema.get("properties", {}))
            if isinstance(name, str) and name in allowed and isinstance(args, Mapping):
                known = allowed[name]
                extra = sorted(str(k) for k in args if k not in known)
                if extra:
                    return unknown_arguments_result(name, extra, known)
        return await call_next(ctx)

    return middleware


def unknown_arguments_result(tool: str, extra: list[str], known: list[str]) -> CallToolResult:
    """The error answer naming the unknown arguments, with the closest known name for each."""
    hints = []
    for arg in extra:
        close = difflib.get_close_matches(arg, known, n=1)
        if close:
            hints.append(f"{arg!r} -> did you mean {close[0]!r}?")
    text = f"invalid_request: unknown argument(s) {extra} for tool {tool}; it takes {known}" + (
        f" ({'; '.join(hints)})" if hints else ""
    )
    return CallToolResult(is_error=True, content=[TextContent(type="text", text=text)])
