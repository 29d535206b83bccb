"""What every job of a staged request is started with, and what its caller hears of it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nsight_core.pipeline import run_profile_job
from nsight_core.plan.admit import Admitted
from nsight_core.plan.config import EngineConfig
from nsight_core.request import ProfileRequest
from nsight_core.results import ProfileResult, StageName
from nsight_core.rows.runs import ProgressCallback
from nsight_core.staging.budget import Budget, StageEta
from nsight_core.staging.merge import tagged
from nsight_core.standby.pool import StandbyPool


@dataclass(frozen=True)
class StageUpdate:
    """The stage runner's report to its caller when a stage starts (engine thread)."""

    stage: StageName
    index: int
    """0-based position of the stage; `count` stages in all."""
    count: int
    backend: str
    calls: int
    """Timed calls the stage makes (annotations x configs x runs)."""
    partial: ProfileResult
    """The finished stages' rows, comparisons and checks, and every stage's state."""
    eta: StageEta | None = None


StageCallback = Callable[[StageUpdate], None]


@dataclass
class StagedRun:
    """One staged request's run: what every one of its jobs is started with."""

    request: ProfileRequest
    job_dir: Path
    result_id: str
    created: str
    final: str
    budget: Budget
    on_progress: ProgressCallback | None
    on_stage: StageCallback | None
    cancel: threading.Event | None
    gpu: str | None
    standby: StandbyPool | None
    config: EngineConfig | None

    def job(self, request: ProfileRequest, job_dir: Path, stage: StageName) -> ProfileResult:
        result = run_profile_job(
            Admitted(request),  # each stage's request is one the admission checked
            job_dir,
            result_id=self.result_id,
            on_progress=self.on_progress,
            cancel=self.cancel,
            gpu=self.gpu,
            standby=self.standby,
            config=self.config,
        )
        return tagged(result, stage, request.reference)

    def started(self, update: StageUpdate) -> None:
        if self.on_stage is not None:
            self.on_stage(update)

    def timed_calls(self, callables: int) -> int:
        return callables * len(self.request.configs) * self.request.runs
