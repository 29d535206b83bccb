"""What one sandboxed process may use: its caps, and a wall-clock limit that can be re-armed.

Plain records, shared by the runner (which enforces them) and the callers (which choose them),
so a caller can build its limits without importing the machinery that applies them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

KILL_GRACE_S = 5.0
"""Seconds between SIGTERM and SIGKILL at the time limit: long enough for ncu to flush."""


@dataclass(frozen=True)
class SandboxLimits:
    """What one sandboxed process may use."""

    wall_s: float
    """Wall-clock limit; the group gets SIGTERM when it is reached."""
    kill_grace_s: float = KILL_GRACE_S
    """Seconds from SIGTERM to SIGKILL."""
    head_bytes: int = 64 * 1024
    """Bytes kept from the start of each stream."""
    tail_bytes: int = 64 * 1024
    """Bytes kept from the end of each stream."""
    file_size_bytes: int = 8 * 1024**3
    """RLIMIT_FSIZE: largest file the job may write (ncu reports of long sweeps are big)."""
    poll_interval_s: float = 0.1
    """How often cancel and resident memory are checked and ``poll`` is called."""
    memory_bytes: int | None = None
    """Resident memory summed over the job's processes; None: `default_memory_limit()`,
    0: no limit."""

    def __post_init__(self) -> None:
        if self.wall_s <= 0 or self.kill_grace_s < 0 or self.poll_interval_s <= 0:
            raise ValueError("SandboxLimits: wall_s and poll_interval_s > 0, kill_grace_s >= 0")
        if self.head_bytes < 0 or self.tail_bytes < 0 or self.file_size_bytes <= 0:
            raise ValueError("SandboxLimits: byte caps must be non-negative")
        if self.memory_bytes is not None and self.memory_bytes < 0:
            raise ValueError("SandboxLimits: memory_bytes must be None, 0 or positive")


class Deadline:
    """A wall-clock limit that can be re-armed while its process runs.

    A process started before it has work (standby/prestarted.py) must not be timed from its start:
    it waits under an idle limit, and the work's own limit counts from the handover.
    Re-arming is one assignment of a tuple, read whole by the supervising thread.
    """

    def __init__(self, limit_s: float) -> None:
        self._state = (0.0, 0.0)
        self.arm(limit_s)

    def arm(self, limit_s: float) -> None:
        """The process may run ``limit_s`` more seconds from now."""
        if limit_s <= 0:
            raise ValueError("Deadline: limit_s must be > 0")
        self._state = (time.monotonic() + limit_s, limit_s)

    @property
    def at(self) -> float:
        return self._state[0]

    @property
    def limit_s(self) -> float:
        return self._state[1]
