"""06: a parameter sweep with `@kernel`: one row per size, configs given at call time (GPU)."""

from __future__ import annotations

from gpu_required import EVENTS_KERNEL, exit_unless_gpu

from nsight_core.annotation import annotate
from nsight_core.nsight.api import ProfileResults, kernel

exit_unless_gpu(__name__, instead=EVENTS_KERNEL)  # before torch: a message, not a traceback

import torch  # noqa: E402

NEEDS_GPU = True
SIZES = [1 << 16, 1 << 20, 1 << 24]


@kernel(runs=3)
def scale(n: int) -> None:
    x = torch.randn(n, device="cuda")
    with annotate("scale"):
        x * 2.0


def main() -> ProfileResults:
    results = scale(configs=SIZES)
    frame = results.to_dataframe()
    print(frame[["n", "AvgValue", "StdDev", "CI95_Lower", "CI95_Upper", "Trust"]])
    assert list(frame["n"]) == SIZES
    times = list(frame["AvgValue"])
    assert times[-1] > times[0], "a 256x larger tensor must take longer"
    return results


if __name__ == "__main__":
    main()
