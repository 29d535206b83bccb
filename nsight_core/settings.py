"""The settings of one job, in one object: what every stage after the request needs.

A profile request and an `@kernel` call both become a `JobSettings`; the pipeline, the
backends and row building take it instead of repeating eight keyword arguments each. A
request's settings are resolved once, by its plan (plan/job_plan.py); the judge reads the
plan's own object from ``job.json`` (`wire` / `from_wire`), not a second derivation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter

from nsight_core.protocol import LaunchSpec
from nsight_core.request import KernelsSpec, ProfileRequest


@dataclass(frozen=True)
class JobSettings:
    """How a job measures: backend, metrics, ncu's knobs, runs and its time limit."""

    backend: str
    metrics: tuple[str, ...]
    cache_control: str = "all"
    clock_control: str = "none"
    kernels: KernelsSpec = field(default_factory=KernelsSpec)
    runs: int = 5
    warmup: int = 1
    time_limit_s: float = 600.0
    check_enabled: bool = True
    diagnose: bool = False
    """Collect ncu's speed-of-light metrics and rules and attach a Diagnosis (diagnose.py)."""
    combine_fn: Callable[[float, float], float] | None = None
    """The `@kernel` API's binary `combine_kernel_metrics` callable (Nsight Python's form):
    folds the kernels of a call for every metric; None uses `kernels.combine`."""
    gpu: str | None = None
    """CUDA_VISIBLE_DEVICES for the job's processes (an index or a UUID): the one GPU the
    scheduler gave it; None leaves the server's own setting."""

    @property
    def replay_mode(self) -> str:
        return self.kernels.replay_mode

    def launch(self, *, cuda_ipc: bool = True) -> LaunchSpec:
        """What of these settings shapes the contestant's command (the backend wraps it from
        this alone, so a judge can start its contestant before its job is known)."""
        return LaunchSpec(
            backend=self.backend,
            metrics=list(self.metrics),
            cache_control=self.cache_control,
            clock_control=self.clock_control,
            replay_mode=self.replay_mode,
            diagnose=self.diagnose,
            cuda_ipc=cuda_ipc,
        )

    def wire(self) -> dict[str, Any]:
        """These settings as JSON data for another process (the judge's ``job.json``).

        A `combine_fn` is a callable of the `@kernel` API's own process: it never crosses."""
        if self.combine_fn is not None:
            raise ValueError("settings with a combine_fn callable cannot leave their process")
        data: dict[str, Any] = _WIRE.dump_python(self, mode="json", exclude={"combine_fn"})
        return data

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> JobSettings:
        """The settings another process wrote with `wire`."""
        return _WIRE.validate_python(data)

    @classmethod
    def of_request(cls, request: ProfileRequest) -> JobSettings:
        """A request's settings. Only its plan (plan/job_plan.py) and the checks made
        before a plan exists (preflight, a stored result's listing) call this."""
        return cls(
            backend=request.backend,
            metrics=tuple(request.metrics),
            cache_control=request.cache_control,
            clock_control=request.clock_control,
            kernels=request.kernels,
            runs=request.runs,
            warmup=request.warmup,
            time_limit_s=request.time_limit_s,
            check_enabled=request.check.enabled,
            diagnose=request.diagnose,
        )


_WIRE: TypeAdapter[JobSettings] = TypeAdapter(JobSettings)
