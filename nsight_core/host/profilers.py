"""Which processes on this host may hold a GPU's profiler.

The driver lets one profiling session use a GPU's counters at a time, and a process that
ncu profiles keeps its session from its first profiled kernel until it ends, idle or not (measured on an H100,
driver 580, ncu 2025.3.1: docs/sandbox.md, "One profiler per GPU"). When ncu answers "a
driver resource was unavailable", the useful answer names who holds it. No API says so;
what can be seen is which processes are profilers (ncu, nsys, DCGM's host engine) or run
injected by one (``CUDA_INJECTION64_PATH`` in their environment, readable for our own
user's processes only), so that is what is listed, with the caveat in the text.
"""

from __future__ import annotations

import os
from pathlib import Path

PROFILER_NAMES = frozenset({"ncu", "nsys", "nv-hostengine", "dcgmi", "dcgm-exporter", "nsight-sys"})
"""Programs that collect GPU profiling data (by their executable's base name)."""
INJECTION_ENV = b"CUDA_INJECTION64_PATH="
"""Set in a process that a CUDA tool (ncu, nsys) injects itself into."""
MAX_LISTED = 6
_CMD_CHARS = 100


def profiler_users(proc: Path = Path("/proc")) -> list[str]:
    """'PID command' of the processes that may hold a GPU's profiler, this process excluded;
    empty where /proc cannot be read."""
    found: list[str] = []
    try:
        entries = sorted((e for e in os.listdir(proc) if e.isdigit()), key=int)
    except OSError:
        return found
    me = os.getpid()
    for entry in entries:
        if int(entry) == me or len(found) >= MAX_LISTED:
            continue
        try:
            argv = (proc / entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not argv or not argv[0]:
            continue
        command = " ".join(a.decode("utf-8", "replace") for a in argv if a)
        # The first two words: ncu's launcher is a shell script (``/bin/sh .../ncu ...``).
        names = {os.path.basename(a.decode("utf-8", "replace")) for a in argv[:2]}
        if names & PROFILER_NAMES or _injected(proc / entry / "environ"):
            found.append(f"{entry} {command[:_CMD_CHARS]}")
    return found


def _injected(environ: Path) -> bool:
    try:
        return any(v.startswith(INJECTION_ENV) for v in environ.read_bytes().split(b"\0"))
    except OSError:
        return False
