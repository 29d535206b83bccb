"""What a request leaves out is filled once from the host and the task it names
(nsight_core/plan/request_defaults.py); what it states is never changed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.host.counters import COUNTERS_DENIED, COUNTERS_FIX
from nsight_core.host.probe import probe_environment
from nsight_core.host.report import CounterAccess, EnvironmentReport, PackageStatus
from nsight_core.plan.config import EngineConfig
from nsight_core.plan.request_defaults import pick_backend, resolve_defaults
from nsight_core.request import DEFAULT_METRIC, BackendFallback, ProfileRequest
from nsight_core.stages import preflight_request
from tests.host_reports import ALLOWED, DENIED, NO_CUPTI, gpu_host_report

DRAM = "dram__bytes_read.sum"

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


def _host(
    counters: CounterAccess, *, ncu: bool = True, cupti: PackageStatus = NO_CUPTI
) -> EngineConfig:
    """This host's settings, seeing the H100 host that `gpu_host_report` makes."""
    here = probe_environment(EngineConfig.from_env())
    report = gpu_host_report(here, counters, ncu=ncu, cupti=cupti)
    return dataclasses.replace(EngineConfig.from_env(), environment=report)


def test_a_request_naming_ncu_where_counters_are_denied_is_answered_by_one_that_reads_none(
    tmp_path: Path,
) -> None:
    config = _host(DENIED)
    assert config.environment is not None and not config.environment.backend("ncu").available
    request = _request(tmp_path, backend="ncu", metrics=[DEFAULT_METRIC, DRAM])
    resolved = resolve_defaults(request, config)
    assert (resolved.backend, resolved.metrics) == ("events", [DEFAULT_METRIC])
    assert resolved.fallback == BackendFallback(
        backend="ncu",
        metrics=[DEFAULT_METRIC, DRAM],
        reason=f"{COUNTERS_DENIED} (RmProfilingAdminOnly: 1)",
        fix=COUNTERS_FIX,
    )
    assert resolve_defaults(resolved, config) == resolved  # resolved once: the same again
    # Metrics alone name ncu too; cupti, where it works, comes before events.
    cupti = PackageStatus(name="cupti-python", installed=True, version="13.0.1", compatible=True)
    with_cupti = resolve_defaults(_request(tmp_path, metrics=[DRAM]), _host(DENIED, cupti=cupti))
    assert with_cupti.backend == "cupti" and with_cupti.fallback is not None
    assert with_cupti.fallback.metrics == [DRAM]
    # An ncu-only replay mode goes with ncu; the answering backend times each call once.
    ranged = _request(tmp_path, backend="ncu", kernels={"replay_mode": "range"})
    assert resolve_defaults(ranged, config).kernels.replay_mode == "kernel"
    for name in ("reference.py", "sub.py"):
        (tmp_path / name).write_text("def ref_kernel(d):\n    return d\n")
    preflight_request(resolved, config=config)  # the answering backend takes it as it is


def test_a_metric_name_known_to_be_wrong_is_refused_even_where_counters_are_denied(
    tmp_path: Path,
) -> None:
    request = _request(tmp_path, backend="ncu", metrics=[DEFAULT_METRIC, "dram__bytes_reed.sum"])
    with pytest.raises(NsightCoreError) as err:
        resolve_defaults(request, _host(DENIED))
    assert err.value.error_class is ErrorClass.INVALID_METRIC


def test_where_counters_are_allowed_a_request_naming_ncu_is_left_as_it_is(
    tmp_path: Path,
) -> None:
    config = _host(ALLOWED)
    assert config.environment is not None and config.environment.backend("ncu").available
    request = _request(tmp_path, backend="ncu", metrics=[DEFAULT_METRIC, DRAM])
    assert resolve_defaults(request, config) is request
    # A record of a fallback beside ncu says nothing true here: it is dropped.
    stale = request.model_copy(
        update={"fallback": BackendFallback(backend="ncu", metrics=[DRAM], reason="r", fix="f")}
    )
    assert resolve_defaults(stale, config).fallback is None


def test_where_ncu_is_missing_and_counters_are_allowed_naming_ncu_is_still_refused(
    tmp_path: Path,
) -> None:
    """Installing ncu is a fix the caller can make: the request that named it is refused
    with it, as before, rather than answered by another backend."""
    (tmp_path / "bin").mkdir()
    config = dataclasses.replace(_host(ALLOWED, ncu=False), ncu="", path=str(tmp_path / "bin"))
    assert config.environment is not None
    assert config.environment.backend("ncu").reason == "no ncu found"
    request = _request(tmp_path, backend="ncu", metrics=[DEFAULT_METRIC, DRAM])
    resolved = resolve_defaults(request, config)
    assert resolved is request and resolved.fallback is None
    with pytest.raises(NsightCoreError) as err:
        preflight_request(resolved, config=config)
    assert err.value.error_class is ErrorClass.PROFILER_ERROR
