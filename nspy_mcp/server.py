"""MCP server: four thin tools over nsight_core (stub; filled in by the MCP issue)."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

from nspy_mcp import __version__


def build_server(store: str | None = None) -> MCPServer:
    return MCPServer("nspy-mcp", version=__version__)


def serve(*, http: bool, host: str, port: int, store: str | None) -> int:
    server = build_server(store)
    if http:
        server.run("streamable-http", host=host, port=port)
    else:
        server.run()
    return 0
