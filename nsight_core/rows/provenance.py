"""How a result was made (`Provenance`), and the one finishing step that attaches it.

Request jobs and `@kernel` jobs end in `finish_result`, so both record the same backend,
versions, settings, timings and artifacts; `with_waits` lets each layer that made a job
wait (the queue, device locks, the standby pool) add its own causes afterwards.
"""

from __future__ import annotations

import platform
import socket
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from nsight_core.collectors import get_backend
from nsight_core.host.contention import load_note
from nsight_core.processes.sandbox.env import child_math_threads
from nsight_core.results import (
    Comparison,
    Correctness,
    Failure,
    JobStatus,
    ProfileResult,
    Provenance,
    Row,
    iso,
    utc_now,
)
from nsight_core.rows.diagnose import JobDiagnosis
from nsight_core.rows.run_values import combine_note
from nsight_core.rows.runs import JobRun
from nsight_core.settings import JobSettings


def _package_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def provenance_of(run: JobRun, settings: JobSettings, gpu: str | None) -> Provenance:
    done = run.events.done
    applies = get_backend(settings.backend).settings_apply
    return Provenance(
        backend=run.settings.backend,
        gpu=gpu or (done.device if done else None),
        ncu_version=run.wrapped.tool_version,
        ncu_report_version=_package_version("ncu-report"),
        nspy_version=_package_version("nspy-mcp") or "0.0.0+unknown",
        python=platform.python_version(),
        host=socket.gethostname(),
        cache_control=settings.cache_control if applies else None,
        clock_control=settings.clock_control if applies else None,
        replay_mode=settings.replay_mode if applies else None,
        command=run.wrapped.argv,
        phase_seconds=dict(done.phase_seconds) if done else {},
        wall_seconds=round(run.wall_s, 3),
        contestant_confined=done.confined if done else None,
        notes=[*_combine_notes(settings), *(done.notes if done else []), *_host_notes(run)],
    )


def _combine_notes(settings: JobSettings) -> list[str]:
    """The metrics a call that launches several kernels fails for, said whether or not one
    did: per-kernel metrics the request names (a backend that takes any metric, in kernel
    replay) that are no time or count total and have no reducer named for them."""
    if not get_backend(settings.backend).any_metric or settings.replay_mode == "range":
        return []
    note = combine_note(settings.metrics, settings.kernels)
    return [note] if note else []


def _host_notes(run: JobRun) -> list[str]:
    if run.host is None:
        return []
    before, after = run.host
    return [load_note(before, after, child_math_threads())]


def finish_result(
    run: JobRun,
    settings: JobSettings,
    *,
    result_id: str,
    created_at: str,
    rows: list[Row],
    gpu: str | None,
    failures: list[Failure],
    status: JobStatus,
    message: str,
    error: Failure | None,
    comparisons: list[Comparison] | None = None,
    correctness: list[Correctness] | None = None,
    diagnosed: JobDiagnosis | None = None,
) -> ProfileResult:
    """The one finishing step: provenance, artifacts and timestamps for any job's result."""
    provenance = provenance_of(run, settings, gpu)
    if diagnosed is not None and diagnosed.notes:
        provenance.notes += diagnosed.notes
    return ProfileResult(
        result_id=result_id,
        status=status,
        message=message,
        created_at=created_at,
        finished_at=iso(utc_now()),
        rows=rows,
        comparisons=comparisons or [],
        correctness=correctness or [],
        failures=failures,
        error=error,
        provenance=provenance,
        artifacts={**run.artifacts, "job_dir": str(run.job_dir)},
        diagnoses=diagnosed.diagnoses if diagnosed is not None else [],
    )


def with_waits(
    result: ProfileResult, waits: Mapping[str, float], *, queued_s: float | None = None
) -> ProfileResult:
    """The result with `waits` (cause -> seconds) added to its provenance's, and their sum.

    Each layer that makes a job wait (the queue and device locks in the server, the standby
    pool in the engine) adds its own causes here, so `wall_seconds` stays the run's time and
    the time before it is accounted for apart. A result without provenance (refused before
    it ran) has nothing to add to."""
    prov = result.provenance
    if prov is None:
        return result
    merged = dict(prov.waits)
    for cause, seconds in waits.items():
        merged[cause] = merged.get(cause, 0.0) + seconds
    merged = {cause: round(s, 3) for cause, s in merged.items() if round(s, 3) > 0}
    update: dict[str, Any] = {"waits": merged, "waited_seconds": round(sum(merged.values()), 3)}
    if queued_s is not None:
        update["queued_seconds"] = round(queued_s, 3)
    return result.model_copy(update={"provenance": prov.model_copy(update=update)})
