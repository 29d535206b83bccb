"""What profiling can do on this machine: `probe_environment` -> `EnvironmentReport`.

The probe looks, it never changes anything: no driver setting, clock or other process is
touched, and remediation text points at the host's administrators and NVIDIA's documents,
never at commands that lift a restriction.

- GPUs come from NVML (``pynvml``), or from ``nvidia-smi --query-gpu`` when NVML is missing.
- Every ``ncu`` is listed and the used one is chosen by `nsight_core.host.ncu_install`, the
  same code the pipeline asks: ``$NSPY_NCU`` when set (when it does not resolve, no ncu is
  used and the report says why), else the first on PATH. Versions come from ``ncu --version``.
- Python packages (ncu-report, cupti-python, torch, triton, cupy, numpy) are found through
  ``importlib.util.find_spec`` and ``importlib.metadata``; torch, triton and cupy are never
  imported into this process.
- Counter permission: ``RmProfilingAdminOnly`` from ``/proc/driver/nvidia/params`` when it is
  readable; with ``deep=True`` also one real kernel profiled by ncu in a child process.

Every external process runs through `sandbox.run_command`: its own session, a time limit,
killed with its whole process group when the limit passes.

Results are cached in this process and in a JSON file under the user cache directory, keyed
by host, driver, PATH, ``$NSPY_NCU`` and Python executable, for `CACHE_TTL_S`.

Size: about 850 lines: one report with many independent sections (GPUs, ncu, counters,
backends, sandbox); each section is a small function, the size is their number.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from nsight_core.host.ncu_install import (
    ATTACH_MODE_MIN,
    LAUNCH_MODE_MIN,
    NO_NCU_HINT,
    NcuDiscovery,
    chip_for_gpu,
    discover_ncu,
    query_ncu_version,
    version_tuple,
)
from nsight_core.processes.sandbox import run_command, sandbox_mechanisms

CACHE_TTL_S = 300.0
"""Five minutes: long enough for an agent's burst of calls, short enough to see a new GPU job."""

NVIDIA_SMI_TIMEOUT_S = 15.0
DEEP_TEST_TIMEOUT_S = 180.0
"""A one-kernel ncu run of a torch script: ~4 s of torch import plus ncu start-up, with room."""

ADMIN_DOCS_URL = "https://developer.nvidia.com/ERR_NVGPUCTRPERM"
_PARAMS_FILE = Path("/proc/driver/nvidia/params")
_DRIVER_VERSION_FILE = Path("/sys/module/nvidia/version")


# --------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GpuProcess(_Model):
    pid: int = Field(description="Process id of a process holding a context on this GPU.")
    used_memory_mib: int | None = Field(None, description="GPU memory it uses, MiB, if known.")
    name: str | None = Field(None, description="Process name, when readable by this user.")


class GpuInfo(_Model):
    index: int = Field(description="NVML / nvidia-smi index.")
    name: str = Field(description="Product name, e.g. 'NVIDIA H200'.")
    uuid: str | None = Field(None, description="GPU UUID.")
    compute_capability: str | None = Field(None, description="e.g. '9.0'.")
    chip: str | None = Field(None, description="ncu chip name inferred from it, e.g. 'gh100'.")
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    sm_clock_mhz: int | None = Field(None, description="Current SM clock.")
    mem_clock_mhz: int | None = Field(None, description="Current memory clock.")
    temperature_c: int | None = None
    processes: list[GpuProcess] = Field(
        default_factory=list, description="Compute processes on this GPU now (a busy GPU is noisy)."
    )
    busy: bool = Field(
        False,
        description="Other processes use this GPU (see processes): timings there are noisier, "
        "and the job queue prefers an idle GPU.",
    )


class NcuInstall(_Model):
    path: str = Field(description="Absolute path of this ncu.")
    source: Literal["NSPY_NCU", "PATH"] = Field(description="Where it was found.")
    version: str | None = Field(None, description="From `ncu --version`, e.g. '2025.3.1.0'.")
    error: str | None = Field(None, description="Why the version could not be read.")
    used: bool = Field(
        description="True for the one nsight_core runs: the NSPY_NCU one when set, else the "
        "first on PATH; none when NSPY_NCU is set but does not resolve (see ncu_problem)."
    )
    launch_mode_ok: bool = Field(description="Version >= 2022.4: usable in launch mode.")
    attach_mode_ok: bool = Field(description="Version >= 2026.2.1: usable in attach mode.")


class PackageStatus(_Model):
    name: str = Field(description="Distribution name.")
    installed: bool
    version: str | None = None
    compatible: bool | None = Field(
        None, description="Fits this ncu / driver; null when that cannot be told here."
    )
    note: str = Field("", description="Why it is or is not compatible.")


class CounterAccess(_Model):
    rm_profiling_admin_only: int | None = Field(
        None,
        description="RmProfilingAdminOnly from /proc/driver/nvidia/params (1: counters are "
        "for administrators only); null when unreadable.",
    )
    is_admin: bool = Field(description="This process runs as root.")
    deep_test: Literal["not_run", "passed", "permission_denied", "failed", "skipped"] = Field(
        "not_run", description="Outcome of the one-kernel ncu test (deep=True)."
    )
    detail: str = Field("", description="What the test or the params file showed.")


class FrameworkStatus(_Model):
    name: Literal["torch", "triton", "cupy", "numpy"]
    installed: bool
    version: str | None = None


class BackendStatus(_Model):
    name: Literal["ncu", "cupti", "events"]
    available: bool
    reason: str = Field(description="Why it works, or what is missing.")


class SandboxStatus(_Model):
    """Which process controls jobs run under here (docs/sandbox.md)."""

    parent_death: str = Field(description="How a job dies with the server.")
    descendants: str = Field(
        description="How processes that left the job's group (setsid) are found at its end."
    )
    memory_limit_bytes: int = Field(description="Default resident-memory limit of a job; 0: none.")
    memory_limit_source: str = Field(
        description="Where the limit comes from (NSPY_MCP_JOB_MEMORY)."
    )
    landlock_abi: int = Field(
        description="Landlock ABI of the kernel; 0: no file system allow-list possible."
    )
    server_protected: bool = Field(
        description="Whether this process's /proc environ is closed to same-user processes."
    )


def _sandbox_status() -> SandboxStatus:
    m = sandbox_mechanisms()
    return SandboxStatus(
        parent_death=m.parent_death,
        descendants=m.descendants,
        memory_limit_bytes=m.memory_limit_bytes,
        memory_limit_source=m.memory_limit_source,
        landlock_abi=m.landlock_abi,
        server_protected=m.this_process_protected,
    )


class EnvironmentReport(_Model):
    host: str
    platform: str = Field(description="OS and machine, e.g. 'Linux-6.8-x86_64'.")
    python: str = Field(description="Python version and executable.")
    probed_at: float = Field(description="Unix time of the probe (cached reports keep it).")
    deep: bool = Field(description="Whether the one-kernel ncu test was attempted.")
    driver_version: str | None = Field(None, description="NVIDIA driver, e.g. '580.159.04'.")
    cuda_driver_version: str | None = Field(None, description="CUDA the driver supports: '13.0'.")
    gpu_source: Literal["nvml", "nvidia-smi", "none"]
    gpus: list[GpuInfo]
    gpu_error: str | None = Field(None, description="Why no GPU could be listed.")
    ncu: list[NcuInstall] = Field(description="Every ncu found; the used one first.")
    ncu_used: str | None = Field(None, description="Path of the ncu nsight_core runs.")
    ncu_problem: str | None = Field(
        None,
        description="Why no ncu is used (e.g. NSPY_NCU set to a path that does not exist); "
        "the pipeline refuses ncu jobs with the same words.",
    )
    ncu_report: PackageStatus
    cupti_python: PackageStatus
    counters: CounterAccess
    frameworks: list[FrameworkStatus]
    backends: list[BackendStatus]
    remediation: list[str] = Field(description="What to do about each problem found.")
    sandbox: SandboxStatus | None = Field(
        None, description="Process controls in force for jobs (always set by a fresh probe)."
    )

    def backend(self, name: str) -> BackendStatus:
        """The status of one backend."""
        return next(b for b in self.backends if b.name == name)


# --------------------------------------------------------------------------------------
# GPUs
# --------------------------------------------------------------------------------------


def _to_str(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _proc_name(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() or None
    except OSError:
        return None


def _nvml_gpus() -> tuple[list[GpuInfo], str | None, str | None]:
    """(gpus, driver version, CUDA driver version); raises when NVML is unusable."""
    import pynvml  # lazy: optional (nvidia-ml-py); its absence is reported, not fatal

    pynvml.nvmlInit()
    try:
        driver = _to_str(pynvml.nvmlSystemGetDriverVersion())
        cuda_int = int(pynvml.nvmlSystemGetCudaDriverVersion_v2())
        cuda = f"{cuda_int // 1000}.{(cuda_int % 1000) // 10}"
        gpus = []
        for i in range(int(pynvml.nvmlDeviceGetCount())):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)

            def opt(fn: Any, *a: Any, h: Any = h) -> Any:
                try:
                    return fn(h, *a)
                except pynvml.NVMLError:
                    return None

            name = _to_str(pynvml.nvmlDeviceGetName(h))
            cc = opt(pynvml.nvmlDeviceGetCudaComputeCapability)
            mem = opt(pynvml.nvmlDeviceGetMemoryInfo)
            procs = opt(pynvml.nvmlDeviceGetComputeRunningProcesses) or []
            cc_s = f"{cc[0]}.{cc[1]}" if cc else None
            gpus.append(
                GpuInfo(
                    index=i,
                    name=name,
                    uuid=_to_str(u) if (u := opt(pynvml.nvmlDeviceGetUUID)) else None,
                    compute_capability=cc_s,
                    chip=chip_for_gpu(name, cc_s),
                    memory_total_mib=int(mem.total) // 2**20 if mem else None,
                    memory_used_mib=int(mem.used) // 2**20 if mem else None,
                    sm_clock_mhz=opt(pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_SM),
                    mem_clock_mhz=opt(pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_MEM),
                    temperature_c=opt(pynvml.nvmlDeviceGetTemperature, pynvml.NVML_TEMPERATURE_GPU),
                    processes=[
                        GpuProcess(
                            pid=int(p.pid),
                            used_memory_mib=(
                                int(p.usedGpuMemory) // 2**20
                                if isinstance(p.usedGpuMemory, int) and p.usedGpuMemory >= 0
                                else None
                            ),
                            name=_proc_name(int(p.pid)),
                        )
                        for p in procs
                    ],
                    busy=any(int(p.pid) != os.getpid() for p in procs),
                )
            )
        return gpus, driver, cuda
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


_SMI_FIELDS = (
    "index,name,uuid,compute_cap,memory.total,memory.used,driver_version,"
    "clocks.sm,clocks.mem,temperature.gpu"
)


def _int_or_none(s: str) -> int | None:
    try:
        return int(float(s.strip()))
    except ValueError:
        return None


def _smi_gpus(smi: str) -> tuple[list[GpuInfo], str | None, str | None]:
    """The same from ``nvidia-smi``; raises RuntimeError when it fails."""
    r = run_command(
        [smi, f"--query-gpu={_SMI_FIELDS}", "--format=csv,noheader,nounits"], NVIDIA_SMI_TIMEOUT_S
    )
    if r.exit_code != 0:
        out = (r.stderr.text() or r.stdout.text()).strip()
        raise RuntimeError((out or r.message).strip()[:300] or "nvidia-smi failed")
    apps = run_command(
        [
            smi,
            "--query-compute-apps=gpu_uuid,pid,used_memory,process_name",
            "--format=csv,noheader,nounits",
        ],
        NVIDIA_SMI_TIMEOUT_S,
    )
    by_uuid: dict[str, list[GpuProcess]] = {}
    for line in apps.stdout.text().splitlines() if apps.exit_code == 0 else []:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) >= 4 and (pid := _int_or_none(cells[1])) is not None:
            by_uuid.setdefault(cells[0], []).append(
                GpuProcess(pid=pid, used_memory_mib=_int_or_none(cells[2]), name=cells[3] or None)
            )
    header = run_command([smi], NVIDIA_SMI_TIMEOUT_S)
    m = re.search(r"CUDA Version:\s*([\d.]+)", header.stdout.text())
    gpus: list[GpuInfo] = []
    driver = None
    for line in r.stdout.text().splitlines():
        c = [x.strip() for x in line.split(",")]
        if len(c) < 10:
            continue
        driver = c[6] or driver
        cc = c[3] if re.fullmatch(r"\d+\.\d+", c[3]) else None
        gpus.append(
            GpuInfo(
                index=_int_or_none(c[0]) or len(gpus),
                name=c[1],
                uuid=c[2] or None,
                compute_capability=cc,
                chip=chip_for_gpu(c[1], cc),
                memory_total_mib=_int_or_none(c[4]),
                memory_used_mib=_int_or_none(c[5]),
                sm_clock_mhz=_int_or_none(c[7]),
                mem_clock_mhz=_int_or_none(c[8]),
                temperature_c=_int_or_none(c[9]),
                processes=by_uuid.get(c[2], []),
                busy=bool(by_uuid.get(c[2])),
            )
        )
    return gpus, driver, m.group(1) if m else None


def list_gpus() -> list[GpuInfo]:
    """This host's GPUs, read now (NVML, else nvidia-smi); empty when none is visible."""
    return _probe_gpus()[0]


def gpu_process_counts() -> dict[int, int]:
    """Compute processes of others per GPU index, read now from NVML (never cached): what the
    job queue asks before it places a job. Empty when NVML is unusable."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no library, no driver: nothing is known to be busy
        return {}
    try:
        counts: dict[int, int] = {}
        for i in range(int(pynvml.nvmlDeviceGetCount())):
            try:
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h) or []
            except pynvml.NVMLError:
                continue
            counts[i] = sum(1 for p in procs if int(p.pid) != os.getpid())
        return counts
    except Exception:
        return {}
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _probe_gpus() -> tuple[list[GpuInfo], str | None, str | None, str, str | None]:
    """(gpus, driver, cuda, source, error)."""
    nvml_error = ""
    try:
        gpus, driver, cuda = _nvml_gpus()
        return gpus, driver, cuda, "nvml", None if gpus else "NVML reports no GPU"
    except ImportError:
        nvml_error = "pynvml (nvidia-ml-py) is not installed"
    except Exception as exc:  # pynvml.NVMLError and its many subclasses
        nvml_error = f"NVML: {exc}"
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return [], None, None, "none", f"{nvml_error}; no nvidia-smi on PATH"
    try:
        gpus, driver, cuda = _smi_gpus(smi)
    except RuntimeError as exc:
        return [], None, None, "none", f"{nvml_error}; nvidia-smi: {exc}"
    return gpus, driver, cuda, "nvidia-smi", None if gpus else "nvidia-smi lists no GPU"


# --------------------------------------------------------------------------------------
# ncu, packages, counters
# --------------------------------------------------------------------------------------


def _probe_ncu(found: NcuDiscovery) -> list[NcuInstall]:
    out = []
    for cand in found.candidates:
        version, error = query_ncu_version(cand.path)
        vt = version_tuple(version)
        out.append(
            NcuInstall(
                path=cand.path,
                source=cand.source,
                version=version,
                error=error,
                used=cand.path == found.used,
                launch_mode_ok=bool(vt) and vt >= LAUNCH_MODE_MIN,
                attach_mode_ok=bool(vt) and vt >= ATTACH_MODE_MIN,
            )
        )
    return out


def _dist_version(*names: str) -> tuple[str, str] | None:
    for n in names:
        try:
            return n, importlib.metadata.version(n)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _ncu_report_status(ncu_version: str | None) -> PackageStatus:
    found = _dist_version("ncu-report", "ncu_report")
    if found is None and importlib.util.find_spec("ncu_report") is None:
        return PackageStatus(
            name="ncu-report",
            installed=False,
            compatible=False,
            note="not installed: reports cannot be read (pip install ncu-report)",
        )
    version = found[1] if found else None
    reader = version_tuple(version)[:2]
    if not ncu_version:
        return PackageStatus(
            name="ncu-report",
            installed=True,
            version=version,
            note="no ncu here; it reads reports of ncu versions up to its own "
            f"({'.'.join(map(str, reader)) or 'unknown'})",
        )
    writer = version_tuple(ncu_version)[:2]
    ok = bool(reader) and reader >= writer
    note = (
        f"reader {'.'.join(map(str, reader))} >= ncu {'.'.join(map(str, writer))}"
        if ok
        else f"ncu-report {version} is older than ncu {ncu_version}: it may fail to read this "
        f"ncu's reports; install ncu-report >= {writer[0]}.{writer[1]} (a reader at least as "
        "new as the writer is the safe rule, as in Nsight Python)"
    )
    return PackageStatus(
        name="ncu-report", installed=True, version=version, compatible=ok, note=note
    )


def _cupti_status(driver: str | None, cuda: str | None) -> PackageStatus:
    found = _dist_version("cupti-python", "cupti_python")
    if found is None:
        return PackageStatus(
            name="cupti-python",
            installed=False,
            compatible=False,
            note="not installed: backend 'cupti' unavailable (pip install 'nspy-mcp[cupti]'; "
            "13.0.x for CUDA 13.0 drivers, 12.8.0 for CUDA 12 drivers)",
        )
    version = found[1]
    cv = version_tuple(version)
    if not cuda:
        return PackageStatus(
            name="cupti-python",
            installed=True,
            version=version,
            note="no NVIDIA driver visible: compatibility unknown",
        )
    dv = version_tuple(cuda)
    drv_major = version_tuple(driver)[:1]
    if cv[:1] == (13,):
        if dv[:1] != (13,) or (drv_major and drv_major < (580,)):
            return PackageStatus(
                name="cupti-python",
                installed=True,
                version=version,
                compatible=False,
                note=f"cupti-python 13.x needs a CUDA 13 driver (R580+); this driver supports "
                f"CUDA {cuda}: use cupti-python 12.8.0",
            )
        if cv[:2] > dv[:2]:
            return PackageStatus(
                name="cupti-python",
                installed=True,
                version=version,
                compatible=False,
                note=f"cupti-python {version} is newer than the driver's CUDA {cuda} (it pulls a "
                f"matching libcupti); on CUDA {cuda} drivers use cupti-python "
                f"{dv[0]}.{dv[1]}.x (13.0.x is known to work on 13.0)",
            )
        return PackageStatus(
            name="cupti-python",
            installed=True,
            version=version,
            compatible=True,
            note=f"fits the driver's CUDA {cuda}",
        )
    if cv[:1] == (12,):
        ok = dv[:1] == (12,) or dv[:1] == (13,)
        return PackageStatus(
            name="cupti-python",
            installed=True,
            version=version,
            compatible=ok,
            note="12.x is the line for CUDA 12 drivers"
            + (
                ""
                if dv[:1] == (12,)
                else f"; with this CUDA {cuda} driver prefer cupti-python {dv[0]}.{dv[1]}.x"
            ),
        )
    return PackageStatus(
        name="cupti-python",
        installed=True,
        version=version,
        compatible=None,
        note="unrecognised version line",
    )


def read_profiling_admin_only(params: Path = _PARAMS_FILE) -> int | None:
    """RmProfilingAdminOnly from the driver's params file; None when unreadable."""
    try:
        text = params.read_text()
    except OSError:
        return None
    m = re.search(r"RmProfilingAdminOnly:\s*(\d+)", text)
    return int(m.group(1)) if m else None


_DEEP_SCRIPTS = {
    "torch": "import torch\nx = torch.ones(4096, device='cuda')\nprint(float((x * 2).sum()))\n",
    "cupy": "import cupy\nx = cupy.ones(4096)\nprint(float((x * 2).sum()))\n",
}


def _deep_counter_test(ncu: str | None, have_gpu: bool) -> tuple[str, str]:
    """(outcome, detail) of profiling one kernel in a child process under ncu."""
    if ncu is None:
        return "skipped", "no ncu found"
    if not have_gpu:
        return "skipped", "no GPU visible"
    fw = next((f for f in ("torch", "cupy") if importlib.util.find_spec(f) is not None), None)
    if fw is None:
        return "skipped", "needs torch or cupy to launch a kernel (triton needs torch too)"
    with tempfile.TemporaryDirectory(prefix="nspy-probe-") as tmp:
        script = Path(tmp) / "one_kernel.py"
        script.write_text(_DEEP_SCRIPTS[fw])
        argv = [
            ncu,
            "--metrics",
            "gpu__time_duration.sum",
            "-c",
            "1",
            "--csv",
            "--target-processes",
            "all",
            sys.executable,
            str(script),
        ]
        r = run_command(argv, DEEP_TEST_TIMEOUT_S)
    text = r.stdout.text() + r.stderr.text()
    if "ERR_NVGPUCTRPERM" in text:
        return "permission_denied", f"ncu reported ERR_NVGPUCTRPERM profiling a {fw} kernel"
    if r.exit_code == 0 and "gpu__time_duration" in text:
        return "passed", f"ncu profiled one {fw} kernel"
    tail = " | ".join(ln for ln in text.strip().splitlines()[-3:])
    why = f"exit {r.exit_code}" if r.exit_code is not None else r.message.split("\n", 1)[0]
    return "failed", why + (f": {tail[:300]}" if tail else "")


def _frameworks() -> list[FrameworkStatus]:
    dists = {
        "torch": ("torch",),
        "triton": ("triton",),
        "numpy": ("numpy",),
        "cupy": ("cupy", "cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x"),
    }
    out = []
    for name in ("torch", "triton", "cupy", "numpy"):
        spec = importlib.util.find_spec(name)
        v = _dist_version(*dists[name]) if spec is not None else None
        out.append(
            FrameworkStatus(
                name=name,
                installed=spec is not None,
                version=v[1] if v else None,
            )
        )
    return out


# --------------------------------------------------------------------------------------
# Verdicts
# --------------------------------------------------------------------------------------


def _ncu_backend(
    gpus: list[GpuInfo],
    ncu: list[NcuInstall],
    report: PackageStatus,
    counters: CounterAccess,
    fixes: list[str],
    found: NcuDiscovery | None = None,
) -> BackendStatus:
    """``found`` says why no ncu is used, in the words the pipeline refuses a job with."""
    used = next((n for n in ncu if n.used), None)
    why_none = (found.problem if found else None) or "no ncu found"
    if not gpus:
        missing = "" if used else f"; {why_none}"
        return BackendStatus(name="ncu", available=False, reason=_NO_GPU + missing)
    if used is None:
        fixes.append(f"{why_none}: {found.hint if found else NO_NCU_HINT}.")
        return BackendStatus(name="ncu", available=False, reason=why_none)
    if not used.launch_mode_ok:
        fixes.append(
            f"The first ncu found ({used.path}) is too old or unreadable; put Nsight Compute "
            "2022.4+ first on PATH or set NSPY_NCU."
        )
        return BackendStatus(
            name="ncu",
            available=False,
            reason=f"ncu {used.version or '?'} at {used.path} is older than 2022.4",
        )
    if not report.installed:
        fixes.append("Install the report reader: pip install 'ncu-report>=2025.3'.")
        return BackendStatus(name="ncu", available=False, reason="ncu-report is not installed")
    restricted = counters.rm_profiling_admin_only == 1 and not counters.is_admin
    if counters.deep_test == "permission_denied" or (restricted and counters.deep_test != "passed"):
        fixes.append(
            "GPU performance counters are restricted to administrators on this host. Ask the "
            f"host's administrators for counter access (NVIDIA explains it at {ADMIN_DOCS_URL}); "
            "meanwhile time kernels with backend 'cupti' or 'events'."
        )
        return BackendStatus(
            name="ncu",
            available=False,
            reason="GPU performance counters are restricted to administrators on this host",
        )
    why = f"ncu {used.version} at {used.path}"
    if counters.deep_test == "passed":
        why += "; a one-kernel test read counters"
    elif counters.rm_profiling_admin_only is None:
        why += "; counter permission not checked (params unreadable; probe with deep=True)"
    if report.compatible is False:
        why += f"; warning: {report.note}"
        fixes.append(report.note)
    return BackendStatus(name="ncu", available=True, reason=why)


def _cupti_backend(gpus: list[GpuInfo], cupti: PackageStatus, fixes: list[str]) -> BackendStatus:
    if not gpus:
        missing = "" if cupti.installed else "; cupti-python not installed"
        return BackendStatus(name="cupti", available=False, reason=_NO_GPU + missing)
    if not cupti.installed or cupti.compatible is False:
        fixes.append(f"For backend 'cupti': {cupti.note}.")
        return BackendStatus(name="cupti", available=False, reason=f"cupti-python: {cupti.note}")
    return BackendStatus(
        name="cupti", available=True, reason=f"cupti-python {cupti.version}: {cupti.note}"
    )


def _events_backend(
    gpus: list[GpuInfo], frameworks: list[FrameworkStatus], fixes: list[str]
) -> BackendStatus:
    have = {f.name for f in frameworks if f.installed}
    if gpus and have & {"torch", "cupy"}:
        why = "CUDA events around each call (L2 flushed between runs)"
    elif gpus:
        why = "host wall-clock timing only: install torch or cupy for CUDA-event timing"
    else:
        why = "host wall-clock timing on CPU (no GPU): for screening and CI, not GPU numbers"
        fixes.append(
            "No NVIDIA GPU is visible to this process: run on a GPU host (nvidia-smi shows the "
            "driver's view; check CUDA_VISIBLE_DEVICES); backend 'events' still works for CPU "
            "screening."
        )
    return BackendStatus(name="events", available=True, reason=why)


_NO_GPU = "no NVIDIA GPU visible"


# --------------------------------------------------------------------------------------
# Entry point and cache
# --------------------------------------------------------------------------------------


_memory_cache: dict[str, EnvironmentReport] = {}


def _driver_fingerprint() -> str:
    try:
        return _DRIVER_VERSION_FILE.read_text().strip()
    except OSError:
        return "no-driver"


def cache_key(deep: bool) -> str:
    """Host, driver, PATH, NSPY_NCU, Python and depth: what the probe's answer depends on."""
    parts = [
        socket.gethostname(),
        _driver_fingerprint(),
        os.environ.get("PATH", ""),
        os.environ.get("NSPY_NCU", ""),
        os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        sys.executable,
        "deep" if deep else "shallow",
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]


def cache_dir() -> Path:
    """Per-user cache directory of nspy-mcp (probe results, live catalogs)."""
    override = os.environ.get("NSPY_CACHE_DIR")
    if override:
        return Path(override)
    import platformdirs  # lazy: only when NSPY_CACHE_DIR is not set

    return Path(platformdirs.user_cache_dir("nspy-mcp", appauthor=False))


def _load_file(key: str, now: float) -> EnvironmentReport | None:
    path = cache_dir() / f"probe-{key}.json"
    try:
        report = EnvironmentReport.model_validate_json(path.read_bytes())
    except (OSError, ValueError):
        return None
    return report if 0 <= now - report.probed_at < CACHE_TTL_S else None


def _save_file(key: str, report: EnvironmentReport) -> None:
    path = cache_dir() / f"probe-{key}.json"
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")  # one writer per process: _probe_lock
        tmp.write_text(report.model_dump_json())
        os.replace(tmp, path)


def _cached(deep: bool, now: float) -> EnvironmentReport | None:
    keys = [cache_key(True)] if deep else [cache_key(False), cache_key(True)]
    for key in keys:  # a deep report answers a shallow question too
        hit = _memory_cache.get(key)
        if hit is not None and 0 <= now - hit.probed_at < CACHE_TTL_S:
            return hit
    for key in keys:
        hit = _load_file(key, now)
        if hit is not None:
            _memory_cache[key] = hit
            return hit
    return None


_probe_lock = threading.Lock()
"""One probe at a time in a process: a caller that comes while one runs (the server's start,
a first request) waits for it and gets its report from the cache."""


def probe_environment(*, deep: bool = False, refresh: bool = False) -> EnvironmentReport:
    """Probe (or recall) what profiling can do here. ``deep`` adds a real one-kernel ncu run."""
    with _probe_lock:
        return _probe_environment(deep=deep, refresh=refresh)


def _probe_environment(*, deep: bool, refresh: bool) -> EnvironmentReport:
    now = time.time()
    if not refresh and (hit := _cached(deep, now)) is not None:
        # Cheap and process-specific (memory limit, protection): never taken from a cache.
        sandbox = _sandbox_status()
        if hit.sandbox == sandbox:
            return hit
        _memory_cache[cache_key(deep)] = fresh = hit.model_copy(update={"sandbox": sandbox})
        return fresh
    gpus, driver, cuda, gpu_source, gpu_error = _probe_gpus()
    found = discover_ncu()
    ncu = _probe_ncu(found)
    used = next((n for n in ncu if n.used), None)
    report_pkg = _ncu_report_status(used.version if used else None)
    cupti = _cupti_status(driver, cuda)
    counters = CounterAccess(
        rm_profiling_admin_only=read_profiling_admin_only(),
        is_admin=hasattr(os, "geteuid") and os.geteuid() == 0,
    )
    if counters.rm_profiling_admin_only is not None:
        counters.detail = f"RmProfilingAdminOnly: {counters.rm_profiling_admin_only}"
    if deep:
        outcome, detail = _deep_counter_test(used.path if used else None, bool(gpus))
        counters.deep_test = outcome  # type: ignore[assignment]
        counters.detail = "; ".join(x for x in (counters.detail, detail) if x)
    frameworks = _frameworks()
    fixes: list[str] = []
    backends = [
        _ncu_backend(gpus, ncu, report_pkg, counters, fixes, found),
        _cupti_backend(gpus, cupti, fixes),
        _events_backend(gpus, frameworks, fixes),
    ]
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
        sandbox=_sandbox_status(),
    )
    key = cache_key(deep)
    _memory_cache[key] = report
    _save_file(key, report)
    return report
