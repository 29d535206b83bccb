"""What a GPU reaches, measured once and kept by its UUID, with the datasheet beside it.

A datasheet's DRAM bandwidth is a bound no kernel reaches; the floor check and % of peak
read against it say less than they seem. So `calibrate` measures the GPU itself, in a child
process (`calibrate_gpu.py`: a device-to-device copy for streaming bandwidth, a bf16 matrix
product for dense math), once per GPU and driver: the answer is kept in the cache
directory by UUID and read back by every later job (`for_job`). `check_environment` with
``deep=true`` calibrates the GPUs that have none yet and shows every number with its method
and the datasheet value.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from nsight_core.host.report import GpuInfo
from nsight_core.plan.config import EngineConfig
from nsight_core.processes.sandbox import run_command

CALIBRATE_TIMEOUT_S = 180.0
"""A fresh torch import, a CUDA context, 2 GiB of buffers and two timed loops, with room."""

PEAK_DRAM_TABLE: tuple[tuple[str, float], ...] = (
    (r"GH200", 4.9e12),
    (r"H200", 4.8e12),
    (r"H100 NVL", 3.9e12),
    (r"H100 PCIe", 2.0e12),
    (r"H100", 3.35e12),
    (r"B200", 8.0e12),
    (r"A100", 2.039e12),
    (r"L40S", 0.864e12),
    (r"\bL4\b", 0.3e12),
)
"""Peak DRAM bandwidth (bytes/s) by GPU name, first match wins, from NVIDIA's datasheets.
Where one name covers several memory configurations (GH200 96/144 GB, A100 40/80 GB) the
highest is listed: a higher peak gives a lower floor, so the check stays conservative."""


def datasheet_bandwidth(gpu: str | None) -> float | None:
    """The datasheet's DRAM bandwidth for a GPU called ``gpu`` ('NVIDIA H200', 'cuda:0
    (NVIDIA H200)'), if the table knows it; None on a CPU."""
    if not gpu or gpu.strip().lower() == "cpu":
        return None
    return next(
        (peak for pattern, peak in PEAK_DRAM_TABLE if re.search(pattern, gpu, re.IGNORECASE)),
        None,
    )


class GpuCeilings(BaseModel):
    """What one GPU reached when calibrated, as kept in the cache: each number with its
    method, the datasheet bandwidth beside, when and under which driver and torch."""

    model_config = ConfigDict(extra="forbid")

    uuid: str
    name: str
    stream_bytes_per_s: float
    stream_method: str
    dense_bf16_flops: float
    dense_method: str
    datasheet_bytes_per_s: float | None = None
    measured_at: float
    driver_version: str | None = None
    torch: str | None = None


def shown(gpu: GpuInfo, kept: GpuCeilings | None) -> GpuInfo:
    """``gpu`` as `check_environment` shows it: its measured ceilings beside the datasheet."""
    return gpu.model_copy(
        update={
            "stream_bytes_per_s": kept.stream_bytes_per_s if kept else None,
            "dense_bf16_flops": kept.dense_bf16_flops if kept else None,
            "datasheet_bytes_per_s": datasheet_bandwidth(gpu.name),
        }
    )


def _folder(config: EngineConfig) -> Path:
    return config.cache_root() / "ceilings"


def _path(uuid: str, config: EngineConfig) -> Path:
    return _folder(config) / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', uuid)}.json"


def cached(uuid: str, config: EngineConfig) -> GpuCeilings | None:
    """The GPU's kept calibration, if there is one and it parses."""
    try:
        return GpuCeilings.model_validate_json(_path(uuid, config).read_text())
    except (OSError, ValidationError):
        return None


def calibrate(gpu: GpuInfo, driver: str | None, config: EngineConfig) -> GpuCeilings:
    """Measure ``gpu`` in a child process and keep the answer; raises RuntimeError saying
    why where the child did not answer (no torch, no GPU, out of time)."""
    if gpu.uuid is None:
        raise RuntimeError(f"GPU {gpu.index} ({gpu.name}) has no UUID to keep its ceilings by")
    with tempfile.TemporaryDirectory(prefix="nspy-ceilings-") as tmp:
        out = Path(tmp) / "ceilings.json"
        r = run_command(
            [sys.executable, "-m", "nsight_core.host.calibrate_gpu", str(out)],
            CALIBRATE_TIMEOUT_S,
            env={"CUDA_VISIBLE_DEVICES": gpu.uuid},
        )
        if r.exit_code != 0 or not out.is_file():
            tail = " | ".join(r.stderr.text().strip().splitlines()[-3:])
            why = f"exit {r.exit_code}" if r.exit_code is not None else r.message
            raise RuntimeError(f"calibrating {gpu.name} failed: {why}: {tail[:400]}")
        measured = json.loads(out.read_text())
    ceilings = GpuCeilings(
        uuid=gpu.uuid,
        name=measured["name"],
        stream_bytes_per_s=measured["stream_bytes_per_s"],
        stream_method=measured["stream_method"],
        dense_bf16_flops=measured["dense_bf16_flops"],
        dense_method=measured["dense_method"],
        datasheet_bytes_per_s=datasheet_bandwidth(gpu.name),
        measured_at=time.time(),
        driver_version=driver,
        torch=measured.get("torch"),
    )
    path = _path(gpu.uuid, config)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(ceilings.model_dump_json(indent=1))
    return ceilings


def for_job(visible: str | None, config: EngineConfig) -> GpuCeilings | None:
    """The calibrated ceilings of the GPU a job ran on: ``visible`` is the entry the
    scheduler gave it (a UUID or an index; None: the first the server sees); None where
    that GPU was never calibrated here."""
    if not _folder(config).is_dir():  # nothing calibrated on this host: no GPU listing
        return None
    entry = visible or (config.visible_devices or "0").split(",")[0].strip()
    if entry.startswith(("GPU-", "MIG-")):
        return cached(entry, config)
    if not entry.isdigit():
        return None
    from nsight_core.host.gpus import list_gpus  # lazy: NVML only where a file may match

    uuid = next((g.uuid for g in list_gpus() if g.index == int(entry)), None)
    return cached(uuid, config) if uuid else None
