"""nspy-mcp: an MCP tool server for checking and profiling GPU kernel candidates."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

try:
    __version__ = version("nspy-mcp")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+unknown"

from nspy_mcp.cli import main

if TYPE_CHECKING:
    from nspy_mcp.server import build_server

__all__ = ["__version__", "build_server", "main"]


def __getattr__(name: str) -> Any:
    """`build_server` on first use: importing the MCP SDK costs ~0.5 s that `--help` never needs."""
    if name == "build_server":
        from nspy_mcp.server import build_server

        return build_server
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
