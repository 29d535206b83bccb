"""Serving stdio so that every message gets an answer, even one the SDK cannot read.

The SDK's stdio transport parses each line with pydantic's JSON parser; a line that is not
JSON, or a request nested deeper than the parser's recursion limit (about 200 levels), turns
into an exception on the read stream that the SDK only logs: the client waits forever.
`serve_stdio` puts `AnsweringReadStream` between the transport and the server, which answers
such items itself on the write stream:

- a line that is not JSON: JSON-RPC -32700 (parse error, id null);
- JSON that is not a JSON-RPC message: -32600 (invalid request, with its id if it has one);
- a request too deep to parse: its id and method are read by a shallow scan; a tools/call
  gets an `invalid_request` tool error (isError), any other request -32600.
"""

from __future__ import annotations

import json
import logging
from types import TracebackType
from typing import Any

import anyio
import mcp_types as types
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from nsight_core.errors import ErrorClass
from nsight_core.request import MAX_CONFIG_DEPTH

log = logging.getLogger(__name__)

Item = SessionMessage | Exception


class AnsweringReadStream:
    """A read stream that answers unreadable messages instead of passing exceptions on."""

    def __init__(self, inner: ReadStream[Item], write: WriteStream[SessionMessage]) -> None:
        self._inner = inner
        self._write = write

    @property
    def last_context(self) -> Any:
        """The sender's context, as the SDK's context streams expose it."""
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Item:
        while True:
            item = await self._inner.receive()
            if not await self._answered(item):
                return item

    async def __anext__(self) -> Item:
        while True:
            item = await self._inner.__anext__()
            if not await self._answered(item):
                return item

    def __aiter__(self) -> AnsweringReadStream:
        return self

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> AnsweringReadStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None

    async def _answered(self, item: Item) -> bool:
        if not isinstance(item, Exception):
            return False
        answer = answer_unreadable(item)
        if answer is None:
            log.warning("dropped an unreadable notification: %s", _brief(item))
        else:
            await self._write.send(SessionMessage(answer))
        return True


def answer_unreadable(exc: Exception) -> types.JSONRPCMessage | None:
    """The answer to a line the transport could not turn into a message; None: a notification."""
    if not isinstance(exc, ValidationError):
        return _error(None, types.PARSE_ERROR, f"Parse error: {_brief(exc)}")
    errors = exc.errors(include_url=False)
    invalid_json = [e for e in errors if e["type"] == "json_invalid"]
    if invalid_json:
        line = invalid_json[0].get("input")
        if "recursion limit" in invalid_json[0]["msg"] and isinstance(line, str):
            return _too_deep(line)
        return _error(
            None,
            types.PARSE_ERROR,
            f"Parse error: the message is not JSON ({invalid_json[0]['msg']}); send one "
            "JSON-RPC message per line",
        )
    message = next((e["input"] for e in errors if isinstance(e.get("input"), dict)), None)
    request_id = _id_of(message.get("id") if isinstance(message, dict) else None)
    return _error(
        request_id,
        types.INVALID_REQUEST,
        "Invalid Request: the JSON is not a JSON-RPC 2.0 message (needs 'jsonrpc': '2.0' "
        "and 'method', or 'result'/'error' with an 'id')",
    )


def _too_deep(line: str) -> types.JSONRPCMessage | None:
    fields = top_level_scalars(line)
    request_id = _id_of(fields.get("id"))
    method = fields.get("method")
    if request_id is None:
        return None if method is not None else _error(None, types.INVALID_REQUEST, _DEEP)
    if method == "tools/call":
        text = (
            f"{ErrorClass.INVALID_REQUEST.value}: the arguments nest deeper than the server's "
            f"JSON parser reads (about 200 levels). To fix: keep each entry of `configs` at "
            f"most {MAX_CONFIG_DEPTH} levels deep and build nested data inside `inputs`"
        )
        result = types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], is_error=True
        )
        return types.JSONRPCResponse(
            jsonrpc="2.0",
            id=request_id,
            result=result.model_dump(by_alias=True, mode="json", exclude_none=True),
        )
    return _error(request_id, types.INVALID_REQUEST, _DEEP)


_DEEP = "Invalid Request: the message nests deeper than the JSON parser reads (about 200 levels)"


def _error(request_id: int | str | None, code: int, message: str) -> types.JSONRPCMessage:
    return types.JSONRPCError(
        jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message)
    )


def _id_of(value: object) -> int | str | None:
    if isinstance(value, bool):
        return None
    return value if isinstance(value, int | str) else None


def _brief(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]


def top_level_scalars(text: str) -> dict[str, Any]:
    """The scalar members of a JSON object's top level, read without parsing nested values.

    A shallow scan: every nested object or array is replaced by null (strings are skipped
    with their escapes), so any depth is fine, and the flat rest is parsed.
    """
    out: list[str] = []
    depth, i = 0, 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            end = _string_end(text, i)
            if depth <= 1:
                out.append(text[i : end + 1])
            i = end + 1
            continue
        if ch in "{[":
            depth += 1
            out.append(ch if depth == 1 else "null" if depth == 2 else "")
        elif ch in "}]":
            out.append(ch if depth == 1 else "")
            depth -= 1
        elif depth <= 1:
            out.append(ch)
        i += 1
    try:
        value = json.loads("".join(out))
    except ValueError:
        return {}
    return {k: v for k, v in value.items() if v is not None} if isinstance(value, dict) else {}


def _string_end(text: str, start: int) -> int:
    i = start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            return i
        i += 1
    return len(text) - 1


async def serve_stdio(server: MCPServer[Any]) -> None:
    """`server.run_stdio_async`, with unreadable messages answered (see the module doc)."""
    lowlevel = server._lowlevel_server  # the SDK's own stdio runner uses it the same way
    async with stdio_server() as (read_stream, write_stream):
        await lowlevel.run(
            AnsweringReadStream(read_stream, write_stream),
            write_stream,
            lowlevel.create_initialization_options(),
        )


def run_stdio(server: MCPServer[Any]) -> None:
    """Serve `server` over stdio until the client closes it."""
    anyio.run(serve_stdio, server)
