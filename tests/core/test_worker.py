"""The worker, through the real pipeline on CPU: what runs inside a timed call."""

from __future__ import annotations

from pathlib import Path

from nsight_core.pipeline import run_profile_job
from nsight_core.request import ProfileRequest

SOURCE = """
import sys

def make_inputs(path):
    return (path,)

def ref(path):
    with open(path, "a") as fh:
        fh.write(f"{'nvtx' in sys.modules}\\n")
    return 1

def same(path):
    return ref(path)
"""


def test_events_timed_calls_open_no_nvtx_range_so_none_pays_for_its_import(tmp_path: Path) -> None:
    log = tmp_path / "seen.txt"
    request = ProfileRequest(
        reference="ref",
        candidates=["same"],
        inputs="make_inputs",
        source=SOURCE,
        configs=[{"path": str(log)}],
        runs=3,
        backend="events",
        check={"check_determinism": False},
    )
    result = run_profile_job(request, tmp_path / "job", result_id="t")
    assert result.status == "done", result.message
    lines = log.read_text().split()
    assert lines and set(lines) == {"False"}
    assert all(r.NumRuns == 3 for r in result.rows)
