"""12: a GPU MODE task folder and its submissions, run as they are (CPU; no GPU).

GPU MODE's format: `reference.py` holds `ref_kernel(data)`, `generate_input(**test, seed)`
and `check_implementation(data, output)`; a submission holds `custom_kernel(data)`; the
tests of `task.yml` are the configs. The judge replaces each test's public seed with a
secret one per call, and the task's own check decides: the submission that replays inputs
from the public seeds fails (docs/gpumode.md).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from nsight_core.pipeline import run_profile_job
from nsight_core.request import ProfileRequest
from nsight_core.results import ProfileResult

TASK_DIR = Path(__file__).resolve().parent / "gpumode_l2norm"


def task_tests(section: str) -> list[dict[str, Any]]:
    """A section of task.yml: one flow-style entry per line, which is also JSON."""
    tests, current = [], ""
    for line in (TASK_DIR / "task.yml").read_text().splitlines():
        if line and not line.startswith((" ", "#")):
            current = line.rstrip(":")
        elif current == section and line.strip().startswith("- {"):
            tests.append(json.loads(line.strip()[2:]))
    return tests


def main() -> ProfileResult:
    request: dict[str, Any] = {
        "reference": "reference.py:ref_kernel",
        "candidates": ["submission.py:custom_kernel", "replay.py:custom_kernel"],
        "configs": task_tests("tests") + task_tests("benchmarks"),
        "workdir": str(TASK_DIR),
        "backend": "events",  # "ncu" on a GPU host
        "runs": 5,
    }
    print(json.dumps(request, indent=1))
    with tempfile.TemporaryDirectory() as job_dir:
        result = run_profile_job(
            ProfileRequest.model_validate(request), Path(job_dir), result_id="example-12"
        )

    for check in result.correctness:
        print(f"{check.Annotation} {check.Params}: passed={check.Passed} {check.Reasons}")
    for comp in result.comparisons:
        print(
            f"{comp.Annotation} {comp.Params}: speedup {comp.Speedup:.3g}x "
            f"[{comp.Speedup_CI95_Lower:.3g}, {comp.Speedup_CI95_Upper:.3g}] resolvable={comp.Resolvable}"
        )

    assert result.status == "done", result.message
    assert len(request["configs"]) == 3
    for check in result.correctness:
        assert check.Passed == (check.Annotation == "submission.py:custom_kernel"), check
    assert {c.Annotation for c in result.comparisons} == {"submission.py:custom_kernel"}
    return result


if __name__ == "__main__":
    main()
