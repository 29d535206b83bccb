"""04: the smallest `@kernel` program: one annotated region, profiled under ncu (GPU).

The decorated function runs in a fresh worker process under Nsight Compute, once per run,
after one warm-up call outside the profiled range; each `annotate` region becomes one row.
"""

from __future__ import annotations

from gpu_required import EVENTS_KERNEL, exit_unless_gpu

from nsight_core.annotation import annotate
from nsight_core.nsight.api import ProfileResults, kernel

exit_unless_gpu(__name__, instead=EVENTS_KERNEL)  # before torch: a message, not a traceback

import torch  # noqa: E402

NEEDS_GPU = True


@kernel(configs=[(1 << 20,)], runs=3)
def add(n: int) -> None:
    a = torch.randn(n, device="cuda")
    b = torch.randn(n, device="cuda")
    with annotate("a + b"):
        a + b


def main() -> ProfileResults:
    results = add()
    frame = results.to_dataframe()
    print(frame[["Annotation", "n", "Metric", "AvgValue", "Unit", "NumRuns", "Trust"]])
    (row,) = results.rows
    assert row.Annotation == "a + b" and row.Unit == "ns" and row.NumRuns == 3
    assert row.AvgValue is not None and row.AvgValue > 0
    return results


if __name__ == "__main__":
    main()
