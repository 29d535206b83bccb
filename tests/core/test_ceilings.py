"""Calibrated ceilings: kept by GPU UUID, read back for the job's GPU, and the floor and %
of peak read against them with their source and the datasheet beside (host/ceilings.py).

The measurement itself needs a GPU (tests/gpu/test_ceilings_gpu.py); here the child runs
for real and fails as it must without one, and a kept calibration is the shape
`calibrate` writes.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from nsight_core.host.ceilings import (
    GpuCeilings,
    cached,
    calibrate,
    datasheet_bandwidth,
    for_job,
)
from nsight_core.host.report import GpuInfo
from nsight_core.plan.config import EngineConfig
from nsight_core.protocol import FloorEvent
from nsight_core.rows.diagnose import JobDiagnosis, diagnose_run

UUID = "GPU-0b1c2d3e-0000-4000-8000-000000000001"


def _config(tmp_path: Path) -> EngineConfig:
    return dataclasses.replace(EngineConfig.from_env(), cache_dir=tmp_path / "cache")


def _kept(config: EngineConfig, stream: float) -> GpuCeilings:
    """A calibration as `calibrate` keeps it (the numbers: a stand-in for a measured one)."""
    kept = GpuCeilings(
        uuid=UUID,
        name="NVIDIA H100 80GB HBM3",
        stream_bytes_per_s=stream,
        stream_method="device-to-device copy of 1024 MiB, read + write, best of 10",
        dense_bf16_flops=7.0e14,
        dense_method="bf16 matrix product 8192^3 (torch.matmul), best of 10",
        datasheet_bytes_per_s=datasheet_bandwidth("NVIDIA H100 80GB HBM3"),
        measured_at=time.time(),
        driver_version="580.159.04",
    )
    path = config.cache_root() / "ceilings" / f"{UUID}.json"
    path.parent.mkdir(parents=True)
    path.write_text(kept.model_dump_json())
    return kept


def test_a_kept_calibration_is_found_for_the_job_that_ran_on_that_gpu(tmp_path: Path) -> None:
    config = _config(tmp_path)
    assert for_job(UUID, config) is None  # nothing calibrated: no GPU listing either
    kept = _kept(config, 3.0e12)
    assert cached(UUID, config) == kept
    assert for_job(UUID, config) == kept
    assert for_job("GPU-another", config) is None
    assert for_job("not-an-index", config) is None


def test_the_floor_and_percent_of_peak_read_against_the_measured_bandwidth(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    kept = _kept(config, 3.0e12)
    floors = [FloorEvent(config_id=0, bytes_in=16, bytes_out=1_000_000)]

    def diagnosed(measured: GpuCeilings | None) -> JobDiagnosis:
        return diagnose_run(
            None,
            diagnose=True,
            groups=[("ref", 0)],
            configs=[{}],
            floor_events=floors,
            gpu="NVIDIA H100 80GB HBM3",
            measured=measured,
        )

    job = diagnosed(kept)
    peak = job.floors[0].peak
    assert peak is not None and peak.bytes_per_s == 3.0e12
    # The source names the measurement, the GPU, and the datasheet value beside it.
    assert UUID in peak.source and "device-to-device copy" in peak.source
    assert "datasheet 3.35 TB/s" in peak.source
    assert any("peak DRAM bandwidth 3 TB/s" in n for n in job.notes)
    sheet = diagnosed(None)
    assert sheet.floors[0].peak is not None and "datasheet" in sheet.floors[0].peak.source
    # A lower measured peak is a higher floor: the write of 1 MB takes longer at 3.0 TB/s.
    measured_ns, sheet_ns = job.floors[0].write_ns, sheet.floors[0].write_ns
    assert measured_ns is not None and sheet_ns is not None and measured_ns > sheet_ns


def test_calibrating_without_a_gpu_says_why_and_keeps_nothing(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    config = _config(tmp_path)
    gpu = GpuInfo(index=0, name="NVIDIA H100 80GB HBM3", uuid=UUID)
    with pytest.raises(RuntimeError, match="calibrating NVIDIA H100 80GB HBM3 failed"):
        calibrate(gpu, "580.159.04", config)  # the child runs, and finds no CUDA device
    assert cached(UUID, config) is None
    with pytest.raises(RuntimeError, match="no UUID"):
        calibrate(gpu.model_copy(update={"uuid": None}), None, config)
