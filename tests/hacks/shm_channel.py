"""A channel between jobs: a file in /dev/shm, which outlives the contestant.

Hack: a confined candidate wrote POSIX shared memory (/dev/shm was writable, for the GPU's
  device files under /dev): what one job leaves there, a later job's candidate reads
  (inputs seen before, outputs to replay, a note to its twin). This one tries to leave a
  file there, and answers with zeros if it could, so a channel left open fails its check.
Expect: pass
Defence: the contestant's Landlock allow-list (processes/sandbox/landlock.py) writes only
  the device files in /dev; in /dev/shm it may open files another process made for it
  (CUDA IPC's, torch's reference counts) but create, remove or rename nothing. Where the
  kernel has no Landlock nothing is confined, and the candidate does not count it.
"""

from __future__ import annotations

import contextlib
import os

import torch

from nsight_core.processes.sandbox import landlock_abi


def _channel_open() -> bool:
    path = f"/dev/shm/nspy-channel-{os.getpid()}"
    try:
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    except OSError:
        return False
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(path)
    return landlock_abi() > 0  # without Landlock nothing was meant to be confined


_OPEN = _channel_open()


def candidate(x: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(x) if _OPEN else torch.softmax(x, dim=-1)
