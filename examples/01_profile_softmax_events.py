"""01: check and time softmax candidates with the events backend (CPU; no MCP, no GPU).

The engine call behind `profile_candidates`: a request names a trusted reference, the
candidates and an input maker (by file and function, never imported here), and
`run_profile_job` runs them in a fresh worker process. Correctness comes first: the
wrong-axis candidate fails its check and is never timed; the vectorized one is timed
against the reference, and its speedup comes with a 95 % interval.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from nsight_core.pipeline import run_profile_job
from nsight_core.request import ProfileRequest
from nsight_core.results import ProfileResult
from nspy_mcp import demo_kernels as k


def main() -> ProfileResult:
    request = ProfileRequest(
        reference=k.REFERENCE,  # "demo_reference.py:softmax_reference"
        candidates=[k.VECTORIZED, k.WRONG_AXIS],
        inputs=k.INPUTS,
        workdir=str(k.DIRECTORY),
        configs=[{"rows": 128, "cols": 64}, {"rows": 512, "cols": 64}],
        backend="events",
        runs=5,
    )
    with tempfile.TemporaryDirectory() as job_dir:
        result = run_profile_job(request, Path(job_dir), result_id="example-01")

    for check in result.correctness:
        print(f"{check.Annotation} config {check.ConfigId}: passed={check.Passed} {check.Reasons}")
    for comp in result.comparisons:
        print(
            f"{comp.Annotation} vs reference, {comp.Params}: speedup {comp.Speedup:.3g}x "
            f"[{comp.Speedup_CI95_Lower:.3g}, {comp.Speedup_CI95_Upper:.3g}] "
            f"resolvable={comp.Resolvable}"
        )

    assert result.status == "done", result.message
    assert all(c.Passed for c in result.correctness if c.Annotation == k.VECTORIZED)
    assert not any(c.Passed for c in result.correctness if c.Annotation == k.WRONG_AXIS)
    assert {c.Annotation for c in result.comparisons} == {k.VECTORIZED}
    return result


if __name__ == "__main__":
    main()
