"""nspy-mcp: an MCP tool server for checking and profiling GPU kernel candidates."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nspy_mcp.cli import main
from nspy_mcp.version import __version__

if TYPE_CHECKING:
    from nspy_mcp.server import build_server

__all__ = ["__version__", "build_server", "main"]


def __getattr__(name: str) -> Any:
    """`build_server` on first use: importing the MCP SDK costs ~0.5 s that `--help` never needs."""
    if name == "build_server":
        from nspy_mcp.server import build_server  # lazy: the MCP SDK costs ~0.5 s

        return build_server
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
