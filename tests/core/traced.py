"""A job whose candidate logs every call it gets, and whether a timer was on the stack."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from nsight_core.pipeline import run_profile_job
from nsight_core.plan.config import EngineConfig
from nsight_core.request import ProfileRequest
from nsight_core.results import ProfileResult


def run_traced(tmp_path: Path, source: str) -> tuple[ProfileResult, list[str]]:
    """Run ``source``'s `trace` against its `ref` (5 runs, events) and return the result and
    the lines `trace(x, path)` appended to its log, one per call."""
    log = tmp_path / "calls.txt"
    request = ProfileRequest(
        reference="ref",
        candidates=["trace"],
        inputs="make_inputs",
        source=source,
        reference_source=source,
        configs=[{"rows": 16, "cols": 64, "path": str(log)}],
        runs=5,
        warmup=1,
        backend="events",
    )
    unconfined = dataclasses.replace(EngineConfig.from_env(), confine="off")  # it logs outside
    result = run_profile_job(request, tmp_path / "job", result_id="t", config=unconfined)
    assert result.status == "done", result.message
    return result, log.read_text().splitlines()
