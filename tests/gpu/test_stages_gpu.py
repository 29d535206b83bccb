"""Staged evaluation on a real GPU: the cupti screen of every candidate, then ncu on the top 3.

Run on a GPU host with ncu, torch and cupti-python: ``python -m pytest -m gpu -s
tests/gpu/test_stages_gpu.py``. The workload is tools/bench/bench_stages.py's (softmax after
0-5 extra elementwise passes), so the fastest three are known: the fewest passes.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from nsight_core.plan.config import EngineConfig
from nsight_core.request import ProfileRequest
from nsight_core.stages import run_staged

BENCH = Path(__file__).resolve().parents[2] / "tools" / "bench" / "bench_stages.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_stages", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    return module


@pytest.mark.gpu
@pytest.mark.skipif(importlib.util.find_spec("cupti") is None, reason="needs cupti-python")
def test_cupti_screen_then_ncu_profiles_the_reference_and_the_three_fastest(
    tmp_path: Path,
) -> None:
    bench = _bench()
    fields = bench.base_request(6, 3, tmp_path / "src") | {
        "metrics": ["gpu__time_duration.sum", "dram__bytes_read.sum"],
        "kernels": {"combine": "sum"},
        "stages": {"screen": "cupti", "top_k": 3},
    }
    request = ProfileRequest.model_validate(fields)
    t0 = time.monotonic()
    # Six candidates and two metrics: too few for a screen to pay (docs/stages.md), so the
    # screen is forced here; the bench's 8x2 case measures the skip.
    result = run_staged(
        request,
        tmp_path / "job",
        result_id="staged-gpu",
        force_screen=True,
        config=EngineConfig.from_env(),
    )
    print(f"\n[staged-gpu] {time.monotonic() - t0:.2f} s: {result.status}: {result.message}")
    assert result.status == "done", result.message
    screen, profile = result.stages
    assert (screen.Backend, screen.Status) == ("cupti", "done"), screen.Reason
    assert (profile.Backend, profile.Status) == ("ncu", "done"), profile.Reason
    kept = [r.Annotation for r in screen.Ranking if r.Kept]
    # c05, c04, c03 run 0, 1 and 2 extra passes (bench_stages.extra_passes).
    assert kept == ["c05", "c04", "c03"], screen.Ranking
    assert profile.Annotations == [bench.REFERENCE, *kept]
    ncu_rows = [r for r in result.rows if r.Stage == "profile"]
    assert {r.Annotation for r in ncu_rows} == {bench.REFERENCE, *kept}
    assert {r.Backend for r in ncu_rows} == {"ncu"} and {r.Evidence for r in ncu_rows} == {
        "external"
    }
    assert {r.Metric for r in ncu_rows} == {"gpu__time_duration.sum", "dram__bytes_read.sum"}
    screen_rows = [r for r in result.rows if r.Stage == "screen"]
    assert {r.Annotation for r in screen_rows} == {bench.REFERENCE, *bench.candidate_names(6)}
    assert {r.Backend for r in screen_rows} == {"cupti"}
