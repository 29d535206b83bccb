"""Patching a timer this backend does not use: the ranges ncu reads, under events or cupti.

Hack: a timer patch that used to cost honest candidates their numbers. It replaces the
  NVTX range functions the ncu timer opens (a candidate aiming at ncu's ranges); under the
  events or cupti backend nothing reads them, yet the whole job's rows were made
  suspicious, the honest ones too.
Expect: pass
Expect trust: ok, noisy
Expect trust ncu: suspicious, failed
Runs alone: the rebinding is process-wide.
Defence: each backend's timer says what its numbers go through (`CallTimer.relies_on`,
  `timers.tampering_affects`): a rebinding off that path is a note in the job's
  provenance and its rows stand; under ncu the ranges are its timer, so its rows are
  suspicious (or fail: the runs have no range).
"""

from __future__ import annotations

from typing import Any

import torch

from nsight_core.collectors import timers


def _no_range(*args: Any, **kwargs: Any) -> None:
    return None


timers.start_range = _no_range  # type: ignore[attr-defined]
timers.end_range = _no_range  # type: ignore[attr-defined]


def candidate(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)
