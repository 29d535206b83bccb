"""The worker, through the real pipeline on CPU: what runs inside a timed call."""

from __future__ import annotations

import sys
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


def test_ncu_mode_loop_reports_one_range_per_call_and_checks_first(tmp_path: Path) -> None:
    # The worker's ncu-backend loop, run directly (no ncu attached, so its NVTX ranges are
    # no-ops): every profiled call still reports its RunKey, and only checked candidates run.
    from nsight_core.pipeline import read_events
    from nsight_core.protocol import WorkerJob
    from nsight_core.sandbox import SandboxLimits, run_sandboxed

    source = SOURCE + "\ndef wrong(path):\n    return 2\n"
    request = ProfileRequest(
        reference="ref",
        candidates=["same", "wrong"],
        inputs="make_inputs",
        source=source,
        configs=[{"path": str(tmp_path / "seen.txt")}],
        runs=3,
        backend="ncu",
        check={"check_determinism": False},
    )
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "src.py").write_text(source)
    job = WorkerJob(
        mode="request",
        backend="ncu",
        request=request,
        workdir=str(tmp_path),
        source_file=str(job_dir / "src.py"),
    )
    job.write(job_dir)
    outcome = run_sandboxed(
        [sys.executable, "-m", "nsight_core.worker", str(job_dir)],
        cwd=job_dir,
        limits=SandboxLimits(wall_s=60),
    )
    assert outcome.error_class is None, outcome.message
    events = read_events(job_dir / "events.jsonl")
    keys = sorted((r.annotation, r.run) for r in events.ranges)
    assert keys == [(a, r) for a in ("ref", "same") for r in range(3)]
    assert all(r.ok for r in events.ranges) and not events.samples
    assert [c.annotation for c in events.checks if not c.passed] == ["wrong"]
