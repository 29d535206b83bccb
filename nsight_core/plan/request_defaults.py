"""What a request leaves out, filled once at the edge from the host and the task it names.

Two settings depend on more than the request:

- **The backend.** A request that names neither a backend nor metrics gets the first of ncu, cupti and events that
  can run here (`probe_environment`), so a KernelBench or GPU MODE one-liner answers on a
  host without ncu or a GPU instead of failing; the resolved request, which the result
  store keeps, and the rows' provenance say which. A staged request keeps its backend: its
  stages choose their own timers.
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

from collections.abc import Callable
from pathlib import Path
from typing import Any

from nsight_core.collectors import BACKEND_ORDER
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.host.report import EnvironmentReport
from nsight_core.plan.config import EngineConfig
from nsight_core.request import Backend, ProfileRequest, parse_callable_spec, request_workdir

MAX_TIME_LIMIT_S = float(
    next(m.le for m in ProfileRequest.model_fields["time_limit_s"].metadata if hasattr(m, "le"))
)
"""The request's own bound on `time_limit_s`."""
TASK_FILE = "task.yml"
TASK_REFERENCE = "ref_kernel"


def pick_backend(report: EnvironmentReport) -> Backend:
    """The first backend of `BACKEND_ORDER` that can run here (events runs anywhere)."""
    return next((b for b in BACKEND_ORDER if report.backend(b).available), "events")


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
    environment report to pick a backend from (default: the host ``config`` describes, as
    its jobs will find it, cached)."""
    update: dict[str, Any] = {}
    given = request.model_fields_set
    if not {"backend", "metrics"} & given and request.stages is None:
        if probe is None:
            from nsight_core.host.probe import probe_environment  # lazy: probes only when asked

            update["backend"] = pick_backend(probe_environment(config))
        else:
            update["backend"] = pick_backend(probe())
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


__all__ = ["pick_backend", "read_task", "resolve_defaults", "task_file"]
