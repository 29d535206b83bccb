"""09: CSV output: the raw per-run values and the aggregated rows, next to the report (GPU)."""

from __future__ import annotations

import csv
import tempfile
from pathlib import Path

from gpu_required import EVENTS_KERNEL, exit_unless_gpu

from nsight_core.annotation import annotate
from nsight_core.nsight.api import ProfileResults, kernel

exit_unless_gpu(__name__, instead=EVENTS_KERNEL)  # before torch: a message, not a traceback

import torch  # noqa: E402

NEEDS_GPU = True
OUT = Path(tempfile.mkdtemp(prefix="nspy-example-09-"))


@kernel(configs=[(1 << 20,)], runs=3, output_csv=True, output_prefix=f"{OUT}/")
def relu(n: int) -> None:
    x = torch.randn(n, device="cuda")
    with annotate("relu"):
        torch.relu(x)


def main() -> ProfileResults:
    results = relu()
    raw = Path(results.artifacts["profiled_data"])
    processed = Path(results.artifacts["processed_data"])
    print(raw, processed, results.artifacts.get("report"))
    with raw.open() as fh:
        assert len(list(csv.DictReader(fh))) == 3  # one line per run
    with processed.open() as fh:
        assert len(list(csv.DictReader(fh))) == 1
    assert Path(results.artifacts["report"]).is_file()
    return results


if __name__ == "__main__":
    main()
