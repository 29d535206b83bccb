"""What a request leaves out is filled once from the host and the task it names
(nsight_core/plan/request_defaults.py); what it states is never changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsight_core.errors import NsightCoreError
from nsight_core.host.probe import probe_environment
from nsight_core.host.report import EnvironmentReport
from nsight_core.plan.config import EngineConfig
from nsight_core.plan.request_defaults import pick_backend, resolve_defaults
from nsight_core.request import ProfileRequest

TASK = """
tests:
  - {"n": 3, "seed": 1}
  - {"n": 5, "seed": 2}
benchmarks:
  - {"n": 5, "seed": 2}
  - {"n": 9, "seed": 3}
benchmark_timeout: 90
"""


def _task(tmp_path: Path, text: str = TASK) -> Path:
    (tmp_path / "reference.py").write_text("def ref_kernel(d):\n    return d\n")
    (tmp_path / "task.yml").write_text(text)
    return tmp_path


def _request(tmp_path: Path, **extra: object) -> ProfileRequest:
    return ProfileRequest.model_validate(
        {
            "reference": "reference.py:ref_kernel",
            "candidates": ["sub.py:custom_kernel"],
            "workdir": str(tmp_path),
            **extra,
        }
    )


def _with(report: EnvironmentReport, available: set[str]) -> EnvironmentReport:
    backends = [b.model_copy(update={"available": b.name in available}) for b in report.backends]
    return report.model_copy(update={"backends": backends})


def test_the_first_backend_that_works_here_is_picked_ncu_first() -> None:
    report = probe_environment(EngineConfig.from_env())
    assert pick_backend(_with(report, {"ncu", "cupti", "events"})) == "ncu"
    assert pick_backend(_with(report, {"cupti", "events"})) == "cupti"
    assert pick_backend(_with(report, set())) == "events"


def test_a_task_fills_configs_and_time_limit_and_a_named_backend_stays(tmp_path: Path) -> None:
    request = _request(_task(tmp_path), backend="cupti")
    resolved = resolve_defaults(request, EngineConfig.from_env())
    assert resolved.configs == [{"n": 3, "seed": 1}, {"n": 5, "seed": 2}, {"n": 9, "seed": 3}]
    assert resolved.time_limit_s == 90.0 and resolved.backend == "cupti"
    assert (
        resolve_defaults(resolved, EngineConfig.from_env()) == resolved
    )  # resolved once: the same again


def test_what_the_request_states_is_kept(tmp_path: Path) -> None:
    request = _request(
        _task(tmp_path), configs=[{"n": 4, "seed": 0}], time_limit_s=30.0, metrics=["x"]
    )
    resolved = resolve_defaults(request, EngineConfig.from_env())
    assert resolved.configs == [{"n": 4, "seed": 0}] and resolved.time_limit_s == 30.0
    assert resolved.backend == "ncu"  # metrics named: ncu stays, and its preflight speaks


def test_the_backend_is_picked_from_the_probe_when_none_is_named(tmp_path: Path) -> None:
    report = probe_environment(EngineConfig.from_env())
    resolved = resolve_defaults(
        _request(tmp_path), EngineConfig.from_env(), probe=lambda: _with(report, {"cupti"})
    )
    assert resolved.backend == "cupti" and resolved.configs == [{}]  # no task.yml here


def test_a_task_file_that_is_not_a_list_of_dicts_is_refused_by_name(tmp_path: Path) -> None:
    request = _request(_task(tmp_path, "tests: [1, 2]\n"), backend="events")
    with pytest.raises(NsightCoreError, match=r"task\.yml: `tests` is not a list"):
        resolve_defaults(request, EngineConfig.from_env())
    request = _request(_task(tmp_path, "tests: [\n"), backend="events")
    with pytest.raises(NsightCoreError, match="could not be read as YAML"):
        resolve_defaults(request, EngineConfig.from_env())
