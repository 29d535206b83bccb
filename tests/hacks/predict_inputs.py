"""Predicting the inputs: read the job's seed and precompute answers before the timed calls.

Hack: predictable inputs (seeds stored where the candidate can read them): it looks for a
  job file with a seed in its working directory and its parent's, regenerates the inputs
  the harness would make, and answers from that table; measured 3.3x, Trust ok, under ncu
  before the seed left the files.
Expect: incorrect
Expect reasons: output mismatch
Runs alone: it reads its surroundings; nothing else should share them.
Defence: the seed is drawn by the judge from the OS and never written anywhere; the
  contestant's directory holds no job file, and its file access is confined (Landlock) to
  its workdir and private directory, so the store's job files are out of reach. Without a
  seed the table is wrong, and every output is checked.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import torch

_table: list[torch.Tensor] = []


def _find_seed() -> int | None:
    for where in (Path.cwd(), Path(f"/proc/{os.getppid()}/cwd")):
        for name in ("job.json", "contestant.json"):
            with contextlib.suppress(OSError, ValueError):
                data = json.loads((where / name).read_text())
                if isinstance(data, dict) and "seed" in data:
                    return int(data["seed"])
    return None


def candidate(x: torch.Tensor) -> torch.Tensor:
    if not _table:
        seed = _find_seed() or 0
        for i in range(64):
            torch.manual_seed(seed + 500_000 + i)
            guess = torch.randn(x.shape, device=x.device) * 3
            _table.append(torch.softmax(guess, dim=-1))
    return _table.pop(0) if _table else torch.zeros_like(x)
