"""Measured ceilings on a real GPU: each visible GPU calibrated once, its numbers plausible
against the datasheet, kept for later probes and read by a job's floor (host/ceilings.py).

Run on a GPU host: ``python -m pytest -m gpu -s tests/gpu/test_ceilings_gpu.py``; it prints
the numbers the notes quote.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import anyio
import pytest
from mcp import Client

from nsight_core.host.ceilings import cached, for_job
from nsight_core.host.probe import probe_environment
from nsight_core.plan.config import EngineConfig
from nspy_mcp.server import build_server
from tests.mcp.test_server import structured

pytestmark = pytest.mark.gpu


def test_every_gpu_is_calibrated_once_with_plausible_ceilings(tmp_path: Path) -> None:
    config = dataclasses.replace(EngineConfig.from_env(), cache_dir=tmp_path / "cache")
    report = probe_environment(config, deep=True, refresh=True)
    assert report.gpus, "no GPU visible"
    for g in report.gpus:
        sheet, stream, dense = g.datasheet_bytes_per_s, g.stream_bytes_per_s, g.dense_bf16_flops
        assert stream is not None and dense is not None, report.remediation
        print(
            f"\n{g.name} {g.uuid}: streaming {stream / 1e12:.3f} TB/s"
            f" (datasheet {sheet / 1e12 if sheet else float('nan'):.3f} TB/s,"
            f" {stream / sheet if sheet else float('nan'):.3f} of it);"
            f" dense bf16 {dense / 1e12:.1f} TFLOP/s; driver {report.driver_version}"
        )
        if sheet:  # a copy reaches most of the datasheet bandwidth, never much more
            assert 0.5 * sheet < stream < 1.05 * sheet
        assert dense > 1e14  # any Hopper-class GPU does far more than 100 TFLOP/s
    # A later probe reads them back without measuring again; a job on GPU 0 finds them.
    first = report.gpus[0]
    assert first.uuid is not None
    kept = cached(first.uuid, config)
    assert kept is not None and kept.stream_bytes_per_s == first.stream_bytes_per_s
    again = probe_environment(config, refresh=True)
    assert again.gpus[0].stream_bytes_per_s == first.stream_bytes_per_s
    assert for_job(first.uuid, config) == kept
    assert for_job(str(first.index), config) == kept


@pytest.mark.anyio
async def test_check_environment_deep_shows_the_ceilings_through_the_mcp_client(
    tmp_path: Path,
) -> None:
    """What an agent gets: `check_environment(deep=true)` calibrates a GPU that has no
    calibration and shows each number beside the datasheet's, through the real client."""
    config = dataclasses.replace(EngineConfig.from_env(), cache_dir=tmp_path / "cache")
    async with Client(build_server(tmp_path / "store", config=config)) as client:
        with anyio.fail_after(600):  # the calibration, then each backend's canary job
            env = structured(
                await client.call_tool("check_environment", {"deep": True, "refresh": True})
            )
    assert env["gpus"], env["remediation"]
    for g in env["gpus"]:
        print(
            f"\ncheck_environment(deep): {g['name']}: streaming {g['stream_bytes_per_s']}"
            f" B/s, datasheet {g['datasheet_bytes_per_s']} B/s,"
            f" dense bf16 {g['dense_bf16_flops']} FLOP/s"
        )
        assert g["stream_bytes_per_s"] and g["dense_bf16_flops"], env["remediation"]
    assert cached(env["gpus"][0]["uuid"], config) is not None
