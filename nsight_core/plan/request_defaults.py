"""What a request leaves out, filled once at the edge from the host and the task it names.

Two settings depend on more than the request:

- **The backend.** A request that names neither a backend nor metrics gets the first of ncu, cupti and events that
  can run here (`probe_environment`), so a KernelBench or GPU MODE one-liner answers on a
  host without ncu or a GPU instead of failing; the resolved request, which the result
  store keeps, and the rows' provenance say which. A staged request keeps its backend: its
  stages choose their own timers.
- **A backend whose counters are denied.** A request that names ncu (or metrics, which
  imply it) where the probe finds GPU performance counters denied to this user
  (`CounterAccess.denied`) gets the first backend that reads none and can run here (cupti,
  else events), its time metric, and a `fallback` record of what it named, why, and the fix
  (`counters_fallback`); its result labels every number from that record
  (rows/fallback.py). Its metric names are still checked, so a typo is refused as before.
  Where ncu is only missing (counters allowed or unknown), nothing changes: the ncu
  preflight refuses the request and says how to install it, since that is a fix the caller
  can make and the request asked for ncu by name.
- **A GPU MODE task's tests.** A reference ``ref_kernel`` beside a ``task.yml`` is a task
  of gpu-mode/reference-kernels: without `configs`, the request runs the task's ``tests``
  then its ``benchmarks`` (each a keyword dict for ``generate_input``; duplicates once);
  without `time_limit_s`, the task's ``benchmark_timeout`` (else ``test_timeout``) bounds
  the job. The task's tolerance lives in its ``check_implementation``, which the judge
  already runs (runtime/formats.py).

The server applies this before a job is queued and `run_profile_job` before it plans, so
a library caller gets the same request; a request already resolved comes back unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nsight_core.collectors import BACKEND_ORDER, get_backend
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.host.counters import COUNTERS_DENIED, COUNTERS_FIX
from nsight_core.host.report import EnvironmentReport
from nsight_core.plan.config import EngineConfig
from nsight_core.request import (
    DEFAULT_METRIC,
    Backend,
    BackendFallback,
    ProfileRequest,
    parse_callable_spec,
    request_workdir,
)

MAX_TIME_LIMIT_S = float(
    next(m.le for m in ProfileRequest.model_fields["time_limit_s"].metadata if hasattr(m, "le"))
)
"""The request's own bound on `time_limit_s`."""
TASK_FILE = "task.yml"
TASK_REFERENCE = "ref_kernel"


def pick_backend(report: EnvironmentReport, *, counters: bool = True) -> Backend:
    """The first backend of `BACKEND_ORDER` that can run here (events runs anywhere); with
    ``counters=False``, the first of those that reads no GPU performance counters."""
    return next(
        (
            b
            for b in BACKEND_ORDER
            if report.backend(b).available and (counters or not get_backend(b).reads_counters)
        ),
        "events",
    )


def counters_fallback(
    request: ProfileRequest, report: EnvironmentReport, config: EngineConfig
) -> dict[str, Any]:
    """What changes in a request whose backend reads counters this host denies (module
    docstring); nothing where it reads none (a request resolved so already among them).
    A `fallback` record only goes with a backend that reads none: beside one that reads
    counters it is dropped, or made again from this host's report."""
    named = get_backend(request.backend)
    if not named.reads_counters:
        return {}
    if not report.counters.denied():
        return {} if request.fallback is None else {"fallback": None}
    named.check_metric_names(request.metrics, config)
    detail = report.counters.detail
    return {
        "backend": pick_backend(report, counters=False),
        # The answering backend's time, under the name every backend takes for its own.
        "metrics": [DEFAULT_METRIC],
        # Only a replaying profiler has other replay modes; the backends that answer refuse them.
        "kernels": request.kernels.model_copy(update={"replay_mode": "kernel"}),
        "fallback": BackendFallback(
            backend=request.backend,
            metrics=list(request.metrics),
            reason=f"{COUNTERS_DENIED} ({detail})" if detail else COUNTERS_DENIED,
            fix=COUNTERS_FIX,
        ),
    }


def task_file(request: ProfileRequest) -> Path | None:
    """The ``task.yml`` beside a GPU MODE reference (``...:ref_kernel``), if there is one."""
    try:
        file, _, attr = parse_callable_spec(request.reference)
    except ValueError:
        return None
    if file is None or attr.rpartition(".")[2] != TASK_REFERENCE:
        return None
    path = (request_workdir(request) / file).resolve().parent / TASK_FILE
    return path if path.is_file() else None


def _dicts(task: dict[str, Any], key: str, path: Path) -> list[dict[str, Any]]:
    items = task.get(key) or []
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise NsightCoreError(
            ErrorClass.INVALID_REQUEST,
            f"{path}: `{key}` is not a list of keyword dicts",
            "fix the task file, or pass `configs` in the request",
        )
    return items


def read_task(path: Path) -> dict[str, Any]:
    """A task file as data; a file that is not YAML mapping is refused by name."""
    import yaml  # lazy: only requests that name a task read one

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise NsightCoreError(
            ErrorClass.INVALID_REQUEST,
            f"{path} could not be read as YAML: {exc}",
            "fix the task file, or pass `configs` in the request",
        ) from exc
    if not isinstance(data, dict):
        raise NsightCoreError(
            ErrorClass.INVALID_REQUEST,
            f"{path} is not a YAML mapping",
            "fix the task file, or pass `configs` in the request",
        )
    return data


def task_configs(task: dict[str, Any], path: Path) -> list[dict[str, Any]]:
    """The task's tests, then its benchmarks, each once, in order."""
    out: list[dict[str, Any]] = []
    for item in [*_dicts(task, "tests", path), *_dicts(task, "benchmarks", path)]:
        if item not in out:
            out.append(item)
    return out


def task_time_limit(task: dict[str, Any]) -> float | None:
    """The task's own limit for a timed run, within ours."""
    for key in ("benchmark_timeout", "test_timeout"):
        value = task.get(key)
        if isinstance(value, int | float) and value > 0:
            return float(min(value, MAX_TIME_LIMIT_S))
    return None


def resolve_defaults(
    request: ProfileRequest,
    config: EngineConfig,
    probe: Callable[[], EnvironmentReport] | None = None,
) -> ProfileRequest:
    """``request`` with what it leaves out filled in (module docstring); ``probe`` is the
    environment report to pick a backend from and to tell denied counters by (default: the
    host ``config`` describes, as its jobs will find it, cached)."""
    update: dict[str, Any] = {}
    given = request.model_fields_set
    if probe is None:
        from nsight_core.host.probe import probe_environment  # lazy: probes only when asked

        probe = functools.partial(probe_environment, config)
    if request.stages is None and not {"backend", "metrics"} & given:
        update["backend"] = pick_backend(probe())
    elif request.stages is None and get_backend(request.backend).reads_counters:
        update.update(counters_fallback(request, probe(), config))
    path = task_file(request) if "configs" not in given or "time_limit_s" not in given else None
    if path is not None:
        task = read_task(path)
        configs = task_configs(task, path)
        if "configs" not in given and configs:
            update["configs"] = configs
        limit = task_time_limit(task)
        if "time_limit_s" not in given and limit is not None:
            update["time_limit_s"] = limit
    if not update:
        return request
    # Validated again as a whole (configs' limits), and every field now counts as given.
    data = request.model_dump(exclude_unset=True)
    return ProfileRequest.model_validate({**data, **update})


__all__ = ["counters_fallback", "pick_backend", "read_task", "resolve_defaults", "task_file"]
