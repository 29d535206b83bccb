"""02: check and profile torch softmax against a Triton softmax with Nsight Compute (GPU).

The same engine call as example 01, on a GPU with the `ncu` backend: correctness first
(the wrong-axis candidate is caught and never profiled), then 3 runs per shape of each
kernel under ncu with the cache flushed, two metrics of different units, and speedups with
95 % intervals from per-run pairs.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from gpu_required import EVENTS_ENGINE, exit_unless_gpu

from nsight_core.pipeline import run_profile_job
from nsight_core.request import ProfileRequest
from nsight_core.results import ProfileResult

# Before torch and triton: on a host without them, a plain message instead of a traceback.
exit_unless_gpu(__name__, instead=EVENTS_ENGINE, triton=True)

NEEDS_GPU = True
HERE = Path(__file__).resolve().parent
METRICS = ["gpu__time_duration.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed"]


def main() -> ProfileResult:
    sys.path.insert(0, str(HERE))
    import gpu_softmax as k  # imports torch and triton: GPU hosts only

    request = ProfileRequest(
        reference=k.REFERENCE,
        candidates=[k.CANDIDATE, k.WRONG],
        inputs=k.INPUTS,
        workdir=str(HERE),
        configs=k.SHAPES,
        metrics=METRICS,
        runs=3,
        backend="ncu",
    )
    with tempfile.TemporaryDirectory() as job_dir:
        result = run_profile_job(request, Path(job_dir), result_id="example-02")
    for row in result.rows:
        print(
            f"{row.Annotation:32} {row.Params} {row.Metric:52} {row.AvgValue} {row.Unit} {row.Trust}"
        )
    for comp in result.comparisons:
        print(
            f"{comp.Annotation} {comp.Params} {comp.Metric}: speedup {comp.Speedup} resolvable={comp.Resolvable}"
        )
    assert result.status == "done", result.message
    wrong = [c for c in result.correctness if c.Annotation == k.WRONG]
    assert wrong and not any(c.Passed for c in wrong)
    assert {r.Metric for r in result.rows} == set(METRICS)
    assert all(r.NumRuns == 3 for r in result.rows if r.Annotation != k.WRONG)
    assert {r.Annotation for r in result.rows} == {k.REFERENCE, k.CANDIDATE}
    return result


if __name__ == "__main__":
    main()
