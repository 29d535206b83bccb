"""The resident-memory limit of a job: its default, and the sizes a user may write for it.

Parsing lives apart from the runner's polling so the environment report can state the limit
(and why a written value was refused) without starting anything.
"""

from __future__ import annotations

import os

from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.plan.config import MEMORY_ENV as MEMORY_ENV

DEFAULT_MEMORY_SHARE = 0.5
"""Default limit as a share of physical RAM: one runaway job cannot push the host into swap."""


_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def physical_memory_bytes() -> int:
    """Physical RAM of the host; 0 when unknown."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def parse_memory(text: str, ram: int | None = None) -> int:
    """``8G``, ``512MiB``, ``123456``, ``40%`` (of RAM), ``0``/``off`` (no limit) -> bytes."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    if t in ("0", "OFF", "NONE", "NO"):
        return 0
    try:
        if t.endswith("%"):
            share = float(t[:-1]) / 100
            if not 0 < share <= 1:
                raise ValueError
            return int((physical_memory_bytes() if ram is None else ram) * share)
        unit = t[-1:] if t[-1:] in _UNITS and not t[-1:].isdigit() else ""
        value = float(t[: len(t) - len(unit)])
        if value < 0:
            raise ValueError
        return int(value * _UNITS[unit])
    except ValueError:
        raise NsightCoreError(
            ErrorClass.INVALID_REQUEST,
            f"{MEMORY_ENV}={text!r} is not a memory size",
            "write bytes, 8G, 512M, a share of RAM like 40%, or 0 for no limit",
        ) from None


def default_memory_limit(setting: str | None = None) -> int:
    """The job limit when none is given: ``setting`` (the configured ``NSPY_MCP_JOB_MEMORY``,
    `EngineConfig.job_memory`), else half the RAM (0: none)."""
    if setting is not None and setting.strip():
        return parse_memory(setting)
    return int(physical_memory_bytes() * DEFAULT_MEMORY_SHARE)


def fmt_bytes(n: int) -> str:
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
