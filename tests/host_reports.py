"""Environment reports of GPU hosts this one is not, made as the probe makes them.

The probe (nsight_core/host/probe.py) gathers `HostFacts` and asks each backend's own
`availability` for its verdict and fix; these helpers do the same with the facts of an H100
host (its GPU, an ncu 2025.3.1 with a shipped gh100 catalog, the report reader, no
cupti-python) and the counter access a test names, on top of this host's real report (its
frameworks, sandbox, Python). Given to a server as `EngineConfig.environment`, such a report
is what `check_environment`, a request's resolution and the preflights all see.
"""

from __future__ import annotations

from nsight_core.collectors import BACKEND_ORDER, get_backend
from nsight_core.collectors.base import HostFacts
from nsight_core.host.report import (
    CounterAccess,
    EnvironmentReport,
    GpuInfo,
    NcuInstall,
    PackageStatus,
)

H100 = GpuInfo(
    index=0,
    name="NVIDIA H100 80GB HBM3",
    uuid="GPU-00000000-0000-0000-0000-000000000000",
    compute_capability="9.0",
    chip="gh100",
)
NCU = NcuInstall(
    path="/opt/nvidia/nsight-compute/2025.3.1/ncu",
    source="PATH",
    version="2025.3.1.0",
    used=True,
    launch_mode_ok=True,
    attach_mode_ok=False,
)
REPORT_READER = PackageStatus(
    name="ncu-report", installed=True, version="2025.3.1", compatible=True
)
NO_CUPTI = PackageStatus(
    name="cupti-python", installed=False, compatible=False, note="not installed"
)
DENIED = CounterAccess(rm_profiling_admin_only=1, is_admin=False, detail="RmProfilingAdminOnly: 1")
"""The driver keeps counters for administrators, and this user is none: ERR_NVGPUCTRPERM."""
ALLOWED = CounterAccess(rm_profiling_admin_only=0, is_admin=False, detail="RmProfilingAdminOnly: 0")


def gpu_host_report(
    base: EnvironmentReport,
    counters: CounterAccess,
    *,
    ncu: bool = True,
    cupti: PackageStatus = NO_CUPTI,
) -> EnvironmentReport:
    """``base`` as an H100 host with ``counters`` (and ncu, unless ``ncu`` is False) reports
    itself: every backend's verdict and the remediation from the backends' own rules."""
    installs = [NCU] if ncu else []
    facts = HostFacts([H100], installs, REPORT_READER, cupti, counters, base.frameworks)
    fixes: list[str] = []
    backends = [get_backend(name).availability(facts, fixes) for name in BACKEND_ORDER]
    return base.model_copy(
        update={
            "gpu_source": "nvml",
            "gpus": [H100],
            "gpu_error": None,
            "ncu": installs,
            "ncu_used": NCU.path if ncu else None,
            "ncu_problem": None if ncu else "no ncu found",
            "ncu_report": REPORT_READER,
            "cupti_python": cupti,
            "counters": counters,
            "backends": backends,
            "remediation": fixes,
        }
    )
