"""Nsight Python 1.1's tool selection: `Tool`, `activate`, `deactivate`, `get_active_tool`.

In Nsight Python a tool is loaded into the caller's process (ncu's injection library, or
CUPTI), so it must be chosen before CUDA starts and ncu can never be unloaded. Here every
call profiles a fresh worker, so a tool is only the process-wide default backend of the
`@kernel` functions that name none: nothing is loaded, the choice can be undone, and
CUDA may already run in the caller. The rules a program relies on stay: one tool at a
time (`activate` of another raises until `deactivate`), the same tool again is a no-op,
and a function keeps the backend it resolved at its first call.

Importing nsight_core activates nothing (Nsight Python activates ncu at import unless
``NSPY_NCU_INIT_AT_IMPORT=0``); a function that names no backend and finds no active tool
uses ncu, which is what that import-time activation amounts to.
"""

from __future__ import annotations

import threading
from enum import StrEnum

from nsight_core.exceptions import NCUNotAvailableError
from nsight_core.host.ncu_install import discover_ncu
from nsight_core.plan.config import EngineConfig
from nsight_core.utils import CUPTI_AVAILABLE

DEFAULT_BACKEND = "ncu"


class Tool(StrEnum):
    """The tools Nsight Python knows; each is one of our backends of the same name."""

    NCU = "ncu"
    CUPTI = "cupti"


_active: Tool | None = None
_lock = threading.Lock()

CUPTI_UNAVAILABLE_MSG = (
    "Tool.CUPTI needs cupti-python: pip install cupti-python (its version matching the "
    "driver's CUDA)"
)


def activate(tool: Tool) -> None:
    """Make ``tool`` the backend of every `@kernel` function that names none.

    Raises `ValueError` for anything but a `Tool`, `RuntimeError` while another tool is
    active (call `deactivate` first), `NCUNotAvailableError` for `Tool.NCU` when no ncu is
    found (PATH, ``NSPY_NCU``), and `ImportError` for `Tool.CUPTI` without cupti-python.
    """
    global _active
    if not isinstance(tool, Tool):
        raise ValueError(
            f"tool must be a nsight.Tool member (one of {[t.name for t in Tool]}), got {tool!r}"
        )
    with _lock:
        if _active is tool:
            return
        if _active is not None:
            raise RuntimeError(
                f"{_active!r} is already active; cannot switch to {tool!r}: call "
                "nsight.deactivate() first"
            )
        # A public entry like `@kernel`: the ncu it checks for is the one that a call's
        # EngineConfig (read then, api.py) will find.
        found = discover_ncu(EngineConfig.from_env()) if tool is Tool.NCU else None
        if found is not None and found.used is None:
            raise NCUNotAvailableError(
                f"Nsight Compute CLI (ncu) is not available on this system: {found.problem}",
                found.hint or "put ncu on PATH, or pass backend='events' to @kernel",
            )
        if tool is Tool.CUPTI and not CUPTI_AVAILABLE:
            raise ImportError(CUPTI_UNAVAILABLE_MSG)
        _active = tool


def deactivate() -> None:
    """Clear the active tool (a no-op when none is); functions that already resolved their
    backend keep it. Unlike Nsight Python, ncu can be deactivated: nothing was loaded."""
    global _active
    with _lock:
        _active = None


def get_active_tool() -> Tool | None:
    """The tool `activate` chose, or None."""
    return _active


def default_backend() -> str:
    """The backend of a `@kernel` function that names none, resolved at its first call."""
    tool = _active
    return tool.value if tool is not None else DEFAULT_BACKEND


__all__ = ["Tool", "activate", "deactivate", "default_backend", "get_active_tool"]
