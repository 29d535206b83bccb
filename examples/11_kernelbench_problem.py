"""11: a KernelBench problem file and ModelNew candidates, run as they are (CPU; no GPU).

KernelBench's format: the problem file holds `Model`, `get_inputs` and `get_init_inputs`,
a candidate file only `ModelNew`. The request names the two classes and nothing else: the
inputs default to the problem's `get_inputs`, the models are built like KernelBench builds
them (seed 42, the problem's init inputs), and outputs are compared with KernelBench's
tolerances. The candidate whose parameters come out differently fails its check and is
never timed (docs/kernelbench.md).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from nsight_core.pipeline import run_profile_job
from nsight_core.request import ProfileRequest
from nsight_core.results import ProfileResult

PROBLEM_DIR = Path(__file__).resolve().parent / "kernelbench"

REQUEST: dict[str, Any] = {
    "reference": "linear_gelu.py:Model",
    "candidates": ["linear_gelu_new.py:ModelNew", "linear_gelu_scratch.py:ModelNew"],
    "workdir": str(PROBLEM_DIR),
    "backend": "events",  # "ncu" on a GPU host
    "runs": 5,
}
"""What an agent passes to profile_candidates as `request`."""


def main() -> ProfileResult:
    request = ProfileRequest.model_validate(REQUEST)
    print(f"inputs: {request.inputs}, configs: {request.configs}")
    with tempfile.TemporaryDirectory() as job_dir:
        result = run_profile_job(request, Path(job_dir), result_id="example-11")

    for check in result.correctness:
        print(f"{check.Annotation}: passed={check.Passed} max abs error {check.MaxAbsError}")
        for reason in check.Reasons:
            print(f"    {reason}")
    for comp in result.comparisons:
        print(
            f"{comp.Annotation} vs Model: speedup {comp.Speedup:.3g}x "
            f"[{comp.Speedup_CI95_Lower:.3g}, {comp.Speedup_CI95_Upper:.3g}] resolvable={comp.Resolvable}"
        )

    assert result.status == "done", result.message
    verdict = {c.Annotation: c.Passed for c in result.correctness}
    assert verdict == {
        "linear_gelu_new.py:ModelNew": True,
        "linear_gelu_scratch.py:ModelNew": False,
    }
    assert {c.Annotation for c in result.comparisons} == {"linear_gelu_new.py:ModelNew"}
    return result


if __name__ == "__main__":
    main()
