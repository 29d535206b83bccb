"""What is installed for profiling: every ncu found, the report reader, cupti-python, frameworks.

Each answer says whether the piece fits the others (reader at least as new as the writer,
cupti-python on the driver's CUDA line); frameworks are found by their import specs and
distributions, never imported into this process.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

from nsight_core.host.ncu_install import (
    ATTACH_MODE_MIN,
    LAUNCH_MODE_MIN,
    NcuDiscovery,
    query_ncu_version,
    version_tuple,
)
from nsight_core.host.report import FrameworkStatus, NcuInstall, PackageStatus


def probe_ncu(found: NcuDiscovery) -> list[NcuInstall]:
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


def ncu_report_status(ncu_version: str | None) -> PackageStatus:
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


def cupti_status(driver: str | None, cuda: str | None) -> PackageStatus:
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


def probe_frameworks() -> list[FrameworkStatus]:
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
