"""07: a derived metric: matmul TFLOP/s from gpu__time_duration, computed per run (GPU).

`derive_metric` gets the run's metric values followed by the config's arguments and
returns ``(value, unit)``; it is applied to every run, then aggregated like any metric.
"""

from __future__ import annotations

from gpu_required import EVENTS_KERNEL, exit_unless_gpu

from nsight_core.annotation import annotate
from nsight_core.nsight.api import ProfileResults, kernel

exit_unless_gpu(__name__, instead=EVENTS_KERNEL)  # before torch: a message, not a traceback

import torch  # noqa: E402

NEEDS_GPU = True


def tflops(time_ns: float, n: int) -> tuple[float, str]:
    return 2 * n**3 / time_ns / 1e3, "TFLOP/s"


# cuBLAS may split a product into more than one kernel: add their times per run.
@kernel(configs=[(2048,), (4096,)], runs=3, derive_metric=tflops, combine_kernel_metrics="sum")
def matmul(n: int) -> None:
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    with annotate("bf16 matmul"):
        a @ b


def main() -> ProfileResults:
    results = matmul()
    derived = [r for r in results.rows if r.Metric == "tflops"]
    for r in derived:
        print(f"n={r.Params['n']}: {r.AvgValue:.1f} {r.Unit} ({r.Kernel})")
    assert len(derived) == 2 and all(r.Unit == "TFLOP/s" and (r.AvgValue or 0) > 1 for r in derived)
    return results


if __name__ == "__main__":
    main()
