"""nspy-mcp: an MCP tool server for checking and profiling GPU kernel candidates."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("nspy-mcp")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+unknown"

from nspy_mcp.cli import main
from nspy_mcp.server import build_server

__all__ = ["__version__", "build_server", "main"]
