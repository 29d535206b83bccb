"""What profiling can do on this machine: `probe_environment` -> `EnvironmentReport`.

The probe looks, it never changes anything: no driver setting, clock or other process is
touched, and remediation text points at the host's administrators and NVIDIA's documents,
never at commands that lift a restriction.

- GPUs come from NVML (``pynvml``), or from ``nvidia-smi --query-gpu`` when NVML is missing
  (`nsight_core.host.gpus`).
- Every ``ncu`` is listed and the used one is chosen by `nsight_core.host.ncu_install`, the
  same code the pipeline asks: ``$NSPY_NCU`` when set (when it does not resolve, no ncu is
  used and the report says why), else the first on PATH. Versions come from ``ncu --version``.
- Python packages (ncu-report, cupti-python, torch, triton, cupy, numpy) are found through
  ``importlib.util.find_spec`` and ``importlib.metadata``; torch, triton and cupy are never
  imported into this process (`nsight_core.host.packages`).
- Counter permission: ``RmProfilingAdminOnly`` from ``/proc/driver/nvidia/params`` when it is
  readable; with ``deep=True`` also one real kernel profiled by ncu in a child process
  (`nsight_core.host.counters`).

This module turns those sections into one verdict per backend with remediation text, and
caches the report. The report's models live in `nsight_core.host.report`; the probe's
surface (``__all__``) names them too, since callers ask the probe for its report.

Every external process runs through `sandbox.run_command`: its own session, a time limit,
killed with its whole process group when the limit passes.

Results are cached in this process and in a JSON file under the user cache directory, keyed
by host, driver, PATH, ``$NSPY_NCU`` and Python executable, for `CACHE_TTL_S`. Those settings
come in the caller's `EngineConfig`, never from this process's environment: the report then
describes the ncu that the same server's jobs run.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import socket
import sys
import threading
import time
from pathlib import Path

from nsight_core.collectors import BACKEND_ORDER, get_backend
from nsight_core.collectors.base import HostFacts
from nsight_core.host.ceilings import GpuCeilings, cached, calibrate, shown
from nsight_core.host.counters import deep_counter_test, read_profiling_admin_only
from nsight_core.host.gpus import gpu_process_counts, list_gpus, probe_gpus
from nsight_core.host.ncu_install import discover_ncu
from nsight_core.host.packages import (
    cupti_status,
    ncu_report_status,
    probe_frameworks,
    probe_ncu,
)
from nsight_core.host.report import (
    BackendStatus,
    CounterAccess,
    EnvironmentReport,
    FrameworkStatus,
    GpuInfo,
    GpuProcess,
    NcuInstall,
    PackageStatus,
    SandboxStatus,
)
from nsight_core.plan.config import EngineConfig
from nsight_core.processes.sandbox import sandbox_mechanisms

__all__ = [
    "CACHE_TTL_S",
    "BackendStatus",
    "CounterAccess",
    "EnvironmentReport",
    "FrameworkStatus",
    "GpuInfo",
    "GpuProcess",
    "NcuInstall",
    "PackageStatus",
    "SandboxStatus",
    "cache_dir",
    "cache_key",
    "gpu_process_counts",
    "list_gpus",
    "probe_environment",
    "read_profiling_admin_only",
]

CACHE_TTL_S = 300.0
"""Five minutes: long enough for an agent's burst of calls, short enough to see a new GPU job."""

_DRIVER_VERSION_FILE = Path("/sys/module/nvidia/version")


def _sandbox_status(memory_setting: str | None) -> SandboxStatus:
    m = sandbox_mechanisms(memory_setting)
    return SandboxStatus(
        parent_death=m.parent_death,
        descendants=m.descendants,
        memory_limit_bytes=m.memory_limit_bytes,
        memory_limit_source=m.memory_limit_source,
        landlock_abi=m.landlock_abi,
        server_protected=m.this_process_protected,
    )


# --------------------------------------------------------------------------------------
# Verdicts
# --------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------
# Entry point and cache
# --------------------------------------------------------------------------------------


_memory_cache: dict[str, EnvironmentReport] = {}


def _driver_fingerprint() -> str:
    try:
        return _DRIVER_VERSION_FILE.read_text().strip()
    except OSError:
        return "no-driver"


def cache_key(deep: bool, config: EngineConfig) -> str:
    """Host, driver, PATH, NSPY_NCU, Python and depth: what the probe's answer depends on."""
    parts = [
        socket.gethostname(),
        _driver_fingerprint(),
        config.path,
        config.ncu,
        config.visible_devices or "",
        sys.executable,
        "deep" if deep else "shallow",
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]


def cache_dir(config: EngineConfig) -> Path:
    """Per-user cache directory of nspy-mcp (probe results, live catalogs)."""
    return config.cache_root()


def _load_file(key: str, now: float, config: EngineConfig) -> EnvironmentReport | None:
    path = cache_dir(config) / f"probe-{key}.json"
    try:
        report = EnvironmentReport.model_validate_json(path.read_bytes())
    except (OSError, ValueError):
        return None
    return report if 0 <= now - report.probed_at < CACHE_TTL_S else None


def _save_file(key: str, report: EnvironmentReport, config: EngineConfig) -> None:
    path = cache_dir(config) / f"probe-{key}.json"
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")  # one writer per process: _probe_lock
        tmp.write_text(report.model_dump_json())
        os.replace(tmp, path)


def _cached(deep: bool, now: float, config: EngineConfig) -> EnvironmentReport | None:
    keys = (
        [cache_key(True, config)] if deep else [cache_key(True, config), cache_key(False, config)]
    )
    # A deep report answers a shallow question too, first: it knows more (whether ncu read
    # counters), which a request naming ncu is resolved by (request_defaults).
    for key in keys:
        hit = _memory_cache.get(key)
        if hit is not None and 0 <= now - hit.probed_at < CACHE_TTL_S:
            return hit
    for key in keys:
        hit = _load_file(key, now, config)
        if hit is not None:
            _memory_cache[key] = hit
            return hit
    return None


_probe_lock = threading.Lock()
"""One probe at a time in a process: a caller that comes while one runs (the server's start,
a first request) waits for it and gets its report from the cache."""


def _ceilings(
    gpus: list[GpuInfo], driver: str | None, deep: bool, config: EngineConfig, fixes: list[str]
) -> list[GpuCeilings]:
    """Each GPU's calibrated ceilings (host/ceilings.py): the kept ones, and with ``deep``
    a calibration of each GPU without one for this driver."""
    out: list[GpuCeilings] = []
    for gpu in gpus:
        kept = cached(gpu.uuid, config) if gpu.uuid else None
        if kept is not None and kept.driver_version not in (None, driver):
            kept = None  # another driver: measured again with deep
        if kept is None and deep:
            try:
                kept = calibrate(gpu, driver, config)
            except RuntimeError as exc:
                fixes.append(f"{exc}; floors and % of peak use datasheet values meanwhile.")
        if kept is not None:
            out.append(kept)
    if gpus and len(out) < len(gpus) and not deep:
        fixes.append(
            "Floors and % of peak use datasheet bandwidth for GPUs not calibrated here: "
            "check_environment with deep=true measures them once (about 10 s a GPU)."
        )
    return out


def probe_environment(
    config: EngineConfig,
    *,
    deep: bool = False,
    refresh: bool = False,
    memory_setting: str | None = None,
) -> EnvironmentReport:
    """Probe (or recall) what profiling can do here. ``deep`` adds a real one-kernel ncu run;
    ``memory_setting``: the configured job memory limit (`EngineConfig.job_memory`). A
    config that carries its own report (`EngineConfig.environment`) is answered with it."""
    if config.environment is not None:
        return config.environment
    with _probe_lock:
        return _probe_environment(config, deep=deep, refresh=refresh, memory_setting=memory_setting)


def _probe_environment(
    config: EngineConfig, *, deep: bool, refresh: bool, memory_setting: str | None
) -> EnvironmentReport:
    now = time.time()
    if not refresh and (hit := _cached(deep, now, config)) is not None:
        # Cheap and process-specific (memory limit, protection): never taken from a cache.
        sandbox = _sandbox_status(memory_setting)
        if hit.sandbox == sandbox:
            return hit
        _memory_cache[cache_key(deep, config)] = fresh = hit.model_copy(update={"sandbox": sandbox})
        return fresh
    gpus, driver, cuda, gpu_source, gpu_error = probe_gpus()
    found = discover_ncu(config)
    ncu = probe_ncu(found)
    used = next((n for n in ncu if n.used), None)
    report_pkg = ncu_report_status(used.version if used else None)
    cupti = cupti_status(driver, cuda)
    counters = CounterAccess(
        rm_profiling_admin_only=read_profiling_admin_only(),
        is_admin=hasattr(os, "geteuid") and os.geteuid() == 0,
    )
    if counters.rm_profiling_admin_only is not None:
        counters.detail = f"RmProfilingAdminOnly: {counters.rm_profiling_admin_only}"
    if deep:
        outcome, detail = deep_counter_test(used.path if used else None, bool(gpus))
        counters.deep_test = outcome  # type: ignore[assignment]
        counters.detail = "; ".join(x for x in (counters.detail, detail) if x)
    frameworks = probe_frameworks()
    fixes: list[str] = []
    gauged = {c.uuid: c for c in _ceilings(gpus, driver, deep, config, fixes)}
    gpus = [shown(g, gauged.get(g.uuid or "")) for g in gpus]
    host = HostFacts(gpus, ncu, report_pkg, cupti, counters, frameworks, found)
    backends = [get_backend(name).availability(host, fixes) for name in BACKEND_ORDER]
    if used and len(ncu) > 1:
        others = ", ".join(f"{n.path} ({n.version or '?'})" for n in ncu[1:])
        fixes.append(
            f"Several ncu found; using {used.path} ({used.version}). Others: {others}. "
            "Set NSPY_NCU to choose another."
        )
    busy = [g for g in gpus if g.processes]
    if busy:
        fixes.append(
            "Other processes use GPU "
            + ", ".join(str(g.index) for g in busy)
            + ": timings will be noisier; nsight_core never touches them."
        )
    report = EnvironmentReport(
        host=socket.gethostname(),
        platform=f"{platform.system()}-{platform.release()}-{platform.machine()}",
        python=f"{platform.python_version()} ({sys.executable})",
        probed_at=now,
        deep=deep,
        driver_version=driver,
        cuda_driver_version=cuda,
        gpu_source=gpu_source,
        gpus=gpus,
        gpu_error=gpu_error,
        ncu=ncu,
        ncu_used=used.path if used else None,
        ncu_problem=found.problem,
        ncu_report=report_pkg,
        cupti_python=cupti,
        counters=counters,
        frameworks=frameworks,
        backends=backends,
        remediation=fixes,
        sandbox=_sandbox_status(memory_setting),
    )
    key = cache_key(deep, config)
    _memory_cache[key] = report
    _save_file(key, report, config)
    return report
