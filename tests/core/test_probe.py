"""nsight_core.host.probe on this CPU-only machine: what it reports without a GPU or ncu, its
cache, and the promise that remediation never tells anyone to
change driver settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsight_core.collectors import BACKEND_ORDER, BACKENDS, get_backend
from nsight_core.collectors.base import HostFacts
from nsight_core.collectors.ncu import classify_ncu_failure
from nsight_core.host import probe
from nsight_core.host.counters import COUNTERS_FIX, COUNTERS_URL
from nsight_core.host.probe import (
    CounterAccess,
    GpuInfo,
    NcuInstall,
    PackageStatus,
    probe_environment,
)
from nsight_core.plan.config import EngineConfig

FORBIDDEN = ("sudo", "modprobe", "nvreg", "/etc/modprobe", "rmmod")


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NSPY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(probe, "_memory_cache", {})


def _no_ncu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("NSPY_NCU", raising=False)


def test_without_gpu_only_events_backend_is_available(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _no_ncu(monkeypatch, tmp_path)
    r = probe_environment(EngineConfig.from_env(), refresh=True)
    if r.gpus:
        pytest.skip("a GPU is visible here; this test is for CPU hosts")
    assert r.gpu_error
    assert not r.backend("ncu").available and "GPU" in r.backend("ncu").reason
    assert not r.backend("cupti").available and r.backend("cupti").reason
    assert r.backend("events").available


def test_missing_ncu_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _no_ncu(monkeypatch, tmp_path)
    r = probe_environment(EngineConfig.from_env(), refresh=True)
    assert r.ncu == [] and r.ncu_used is None
    assert "no ncu" in r.backend("ncu").reason


def test_ncu_from_nspy_ncu_comes_first_and_bad_version_is_reported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _no_ncu(monkeypatch, tmp_path)
    fake = tmp_path / "not-ncu"
    fake.write_text("#!/bin/sh\necho 'no version'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("NSPY_NCU", str(fake))
    (n,) = probe_environment(EngineConfig.from_env(), refresh=True).ncu
    assert (n.source, n.used, n.version, n.launch_mode_ok) == ("NSPY_NCU", True, None, False)
    assert n.error


def test_cached_probe_is_the_same_object_and_refresh_probes_again() -> None:
    first = probe_environment(EngineConfig.from_env())
    assert probe_environment(EngineConfig.from_env()) is first
    again = probe_environment(EngineConfig.from_env(), refresh=True)
    assert again is not first and again.probed_at >= first.probed_at


def test_probe_is_recalled_from_the_cache_file_by_a_fresh_process_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = probe_environment(EngineConfig.from_env())
    monkeypatch.setattr(probe, "_memory_cache", {})
    recalled = probe_environment(EngineConfig.from_env())
    assert recalled is not first and recalled == first


def test_framework_detection_does_not_import_heavy_frameworks() -> None:
    import sys

    before = {m for m in ("torch", "triton", "cupy") if m in sys.modules}
    probe_environment(EngineConfig.from_env(), refresh=True)
    after = {m for m in ("torch", "triton", "cupy") if m in sys.modules}
    assert after == before


def test_counter_params_file_is_read(tmp_path: Path) -> None:
    params = tmp_path / "params"
    params.write_text("ResmanDebugLevel: 4294967295\nRmProfilingAdminOnly: 1\n")
    assert probe.read_profiling_admin_only(params) == 1
    assert probe.read_profiling_admin_only(tmp_path / "missing") is None


def _facts_with(counters: CounterAccess, report_ok: bool = True) -> HostFacts:
    """An H200 host's facts with ``counters``: an ncu 2025.3, the report reader (or not), no
    cupti-python, no framework."""
    gpu = [GpuInfo(index=0, name="NVIDIA H200", compute_capability="9.0", chip="gh100")]
    ncu = [
        NcuInstall(
            path="/x/ncu",
            source="PATH",
            version="2025.3.1.0",
            used=True,
            launch_mode_ok=True,
            attach_mode_ok=False,
        )
    ]
    rep = PackageStatus(name="ncu-report", installed=report_ok, version="2026.3.1", compatible=True)
    cupti = PackageStatus(name="cupti-python", installed=False, compatible=False, note="missing")
    return HostFacts(gpu, ncu, rep, cupti, counters, [])


def _remediation_for(counters: CounterAccess, report_ok: bool = True) -> list[str]:
    host = _facts_with(counters, report_ok)
    fixes: list[str] = []
    for name in BACKEND_ORDER:
        get_backend(name).availability(host, fixes)
    no_gpu = HostFacts([], [], host.ncu_report, host.cupti, counters, [])
    get_backend("ncu").availability(no_gpu, fixes)
    return fixes


def test_restricted_counters_point_at_admins_and_other_backends_never_at_driver_settings() -> None:
    restricted = CounterAccess(rm_profiling_admin_only=1, is_admin=False)
    fixes = _remediation_for(restricted)
    text = " ".join(fixes).lower()
    assert "administrator" in text and "events" in text
    # The cheapest fix, in the words a request naming ncu is answered with there
    # (request_defaults) and ncu's refusal at run time gives (ncu.classify_ncu_failure).
    assert any(COUNTERS_FIX in f for f in fixes) and COUNTERS_URL in COUNTERS_FIX
    hint = classify_ncu_failure(1, "==ERROR== ERR_NVGPUCTRPERM - no permission", False, metrics=[])
    assert hint is not None and COUNTERS_FIX in hint.hint
    for word in FORBIDDEN:
        assert word not in text
    denied = CounterAccess(rm_profiling_admin_only=0, is_admin=False, deep_test="permission_denied")
    assert any("administrator" in f for f in _remediation_for(denied))


def test_remediation_of_this_host_contains_no_driver_setting_instructions() -> None:
    text = " ".join(probe_environment(EngineConfig.from_env(), refresh=True).remediation).lower()
    for word in FORBIDDEN:
        assert word not in text


def test_every_backend_says_whether_it_runs_here_in_the_order_of_preference() -> None:
    # The probe gathers the host's facts; each backend judges them itself (no names compared
    # in the probe), so a new backend shows up here by being registered.
    assert sorted(BACKEND_ORDER) == sorted(BACKENDS)
    report = probe.probe_environment(EngineConfig.from_env(), refresh=True)
    assert [b.name for b in report.backends] == list(BACKEND_ORDER)
    assert report.backend("events").available  # it runs anywhere, the host clock at least


@pytest.mark.parametrize(
    ("admin_only", "is_admin", "deep_test", "denied"),
    [
        (1, False, "not_run", True),  # the driver keeps counters for admins; this user is none
        (1, True, "not_run", False),
        (1, False, "passed", False),  # the user holds the capability some other way
        (0, False, "permission_denied", True),  # ncu itself was refused
        (None, False, "not_run", False),  # unreadable: not known to be denied
        (0, False, "not_run", False),
    ],
)
def test_counters_are_denied_where_the_driver_or_a_real_test_says_so(
    admin_only: int | None, is_admin: bool, deep_test: str, denied: bool
) -> None:
    counters = CounterAccess.model_validate(
        {"rm_profiling_admin_only": admin_only, "is_admin": is_admin, "deep_test": deep_test}
    )
    assert counters.denied() is denied
    assert get_backend("ncu").availability(_facts_with(counters), []).available is not denied


def test_a_deep_report_answers_a_shallow_question_first() -> None:
    """It knows more (whether ncu read counters), and a request naming ncu is resolved by
    what the shallow question gets (request_defaults)."""
    config = EngineConfig.from_env()
    shallow = probe_environment(config, refresh=True)
    deep = probe_environment(config, deep=True, refresh=True)
    assert deep.deep and not shallow.deep
    assert probe_environment(config) is deep
