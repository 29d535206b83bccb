"""08: several kernels in one annotation: a named reducer, and range replay (GPU).

`x.softmax(-1).sum()` launches more than one kernel. With ``combine_kernel_metrics="sum"``
each run's kernel times are added (the kernel names are joined with '|'); with
``replay_mode="range"`` ncu profiles the whole annotated range as one result named 'range'.
"""

from __future__ import annotations

from gpu_required import EVENTS_KERNEL, exit_unless_gpu

from nsight_core.annotation import annotate
from nsight_core.nsight.api import ProfileResults, kernel

exit_unless_gpu(__name__, instead=EVENTS_KERNEL)  # before torch: a message, not a traceback

import torch  # noqa: E402

NEEDS_GPU = True


def body(n: int) -> None:
    x = torch.randn(n, 1024, device="cuda")
    with annotate("softmax then sum"):
        x.softmax(-1).sum()


summed = kernel(configs=[(4096,)], runs=3, combine_kernel_metrics="sum")(body)
ranged = kernel(configs=[(4096,)], runs=3, replay_mode="range")(body)


def main() -> tuple[ProfileResults, ProfileResults]:
    a, b = summed(), ranged()
    (row_a,) = a.rows
    (row_b,) = b.rows
    print(f"sum of kernels: {row_a.AvgValue} ns over {row_a.Kernel}")
    print(f"range replay:   {row_b.AvgValue} ns ({row_b.Kernel})")
    assert row_a.Kernel is not None and "|" in row_a.Kernel
    assert row_b.Kernel == "range"
    return a, b


if __name__ == "__main__":
    main()
