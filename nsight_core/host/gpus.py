"""This host's GPUs: from NVML (``pynvml``), or from ``nvidia-smi`` when NVML is missing.

Read by the probe for its report and, uncached, by the job queue before it places a job; so
the listing stands alone, apart from the rest of the probe.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path
from typing import Any

from nsight_core.host.ncu_install import chip_for_gpu
from nsight_core.host.report import GpuInfo, GpuProcess
from nsight_core.processes.sandbox import run_command

NVIDIA_SMI_TIMEOUT_S = 15.0


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
    return probe_gpus()[0]


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


def _descends_from(pid: int, ancestor: int) -> bool:
    """Whether ``pid`` is ``ancestor`` or one of its descendants (``/proc``'s parent links)."""
    seen = 0
    while pid > 1 and seen < 64:
        if pid == ancestor:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        seen += 1
    return False


def gpu_tenants(gpu: str) -> tuple[int, list[str]] | None:
    """Processes with a CUDA context on ``gpu`` (an index or a UUID as CUDA_VISIBLE_DEVICES
    names it), read now from NVML: (how many are this process's own descendants, the others
    as "pid N (name, M MiB)"). None when NVML cannot say.

    Another tenant's kernels share the SMs and memory bandwidth with a job's, so a job's
    provenance names them; our own pre-started judges only hold a context and wait."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no library, no driver
        return None
    try:
        if gpu.isdigit():
            h = pynvml.nvmlDeviceGetHandleByIndex(int(gpu))
        else:
            h = pynvml.nvmlDeviceGetHandleByUUID(gpu)
        procs = list(pynvml.nvmlDeviceGetComputeRunningProcesses(h) or [])
        ours, others = 0, []
        me = os.getpid()
        for p in procs:
            pid = int(p.pid)
            if _descends_from(pid, me):
                ours += 1
                continue
            used = getattr(p, "usedGpuMemory", None)
            mib = f", {int(used) >> 20} MiB" if isinstance(used, int) else ""
            others.append(f"pid {pid} ({_proc_name(pid) or 'unknown'}{mib})")
        return ours, others
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def probe_gpus() -> tuple[list[GpuInfo], str | None, str | None, str, str | None]:
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
