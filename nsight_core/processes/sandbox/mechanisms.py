"""Which process controls the sandbox uses on this host, for the environment report.

Read from the other modules of the package and never raising, so `check_environment` can
say what is in force without starting a job.
"""

from __future__ import annotations

from dataclasses import dataclass

from nsight_core.errors import NsightCoreError
from nsight_core.processes.sandbox.landlock import landlock_abi
from nsight_core.processes.sandbox.memory import (
    DEFAULT_MEMORY_SHARE,
    MEMORY_ENV,
    default_memory_limit,
    physical_memory_bytes,
)
from nsight_core.processes.sandbox.this_process import LIBC, PR_GET_DUMPABLE, prctl


@dataclass(frozen=True)
class SandboxMechanisms:
    """Which process controls `run_sandboxed` uses on this host."""

    parent_death: str
    """How a child dies with its parent."""
    descendants: str
    """How descendants that left the group are found at a job's end."""
    memory_limit_bytes: int
    """The default job limit (0: none)."""
    memory_limit_source: str
    """Where the limit comes from, or why it could not be read."""
    landlock_abi: int
    """Landlock ABI of the kernel (0: no file system allow-list possible)."""
    this_process_protected: bool
    """Whether this process is non-dumpable (`protect_this_process`)."""


def sandbox_mechanisms(memory_setting: str | None = None) -> SandboxMechanisms:
    """What `run_sandboxed` does on this host, with the configured memory limit
    (`EngineConfig.job_memory`); never raises."""
    linux = LIBC is not None
    try:
        limit = default_memory_limit(memory_setting)
        raw = (memory_setting or "").strip()
        source = f"{MEMORY_ENV}={raw}" if raw else f"{DEFAULT_MEMORY_SHARE:.0%} of RAM"
    except NsightCoreError as exc:
        limit, source = int(physical_memory_bytes() * DEFAULT_MEMORY_SHARE), str(exc)
    return SandboxMechanisms(
        parent_death="PR_SET_PDEATHSIG + parent pipe" if linux else "parent pipe",
        descendants=(
            "subreaper + /proc walk (group, session, parent links, job id)"
            if linux
            else "process group only"
        ),
        memory_limit_bytes=limit,
        memory_limit_source=source,
        landlock_abi=landlock_abi(),
        this_process_protected=linux and prctl(PR_GET_DUMPABLE) == 0,
    )
