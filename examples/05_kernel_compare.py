"""05: two implementations of softmax in one `@kernel` function, normalized per run (GPU).

With ``normalize_against="torch"`` every run's value is divided by the same run's torch
value (paired ratios), so the unit becomes 'ratio' and the spread is the spread of ratios.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpu_required import EVENTS_KERNEL, exit_unless_gpu

from nsight_core.annotation import annotate
from nsight_core.nsight.api import ProfileResults, kernel

# Before torch and triton: on a host without them, a plain message instead of a traceback.
exit_unless_gpu(__name__, instead=EVENTS_KERNEL, triton=True)

import torch  # noqa: E402

NEEDS_GPU = True
HERE = str(Path(__file__).resolve().parent)


@kernel(configs=[(4096, 1024), (4096, 4096)], runs=3, normalize_against="torch")
def softmax(rows: int, cols: int) -> None:
    sys.path.insert(0, HERE)  # the body runs in the worker process: make the kernels importable
    import gpu_softmax

    x = torch.randn(rows, cols, device="cuda")
    with annotate("torch"):
        torch.softmax(x, dim=-1)
    with annotate("triton"):
        gpu_softmax.triton_softmax(x)


def main() -> ProfileResults:
    results = softmax()
    print(results.to_dataframe()[["Annotation", "rows", "cols", "AvgValue", "Unit", "Normalized"]])
    for row in results.rows:
        assert row.Unit == "ratio" and row.Normalized == "torch"
        if row.Annotation == "torch":
            assert row.AvgValue == 1.0
    return results


if __name__ == "__main__":
    main()
