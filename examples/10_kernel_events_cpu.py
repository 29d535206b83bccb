"""10: the `@kernel` API without a GPU: the events backend times each annotated region.

On a CPU host the same programming model works with ``backend="events"``: each
`annotate` region is timed with the host clock in the worker process; rows say so
(`Backend == "events"`), and their numbers are not comparable with ncu's.
"""

from __future__ import annotations

import numpy as np

from nsight_core.annotation import annotate
from nsight_core.nsight.api import ProfileResults, kernel


@kernel(configs=[(64,), (256,)], runs=3, backend="events")
def products(n: int) -> None:
    a = np.random.rand(n, n)
    with annotate("matmul"):
        a @ a
    with annotate("elementwise"):
        a * a


def main() -> ProfileResults:
    results = products()
    frame = results.to_dataframe()
    print(frame[["Annotation", "n", "Metric", "AvgValue", "Unit", "NumRuns", "Trust"]])
    assert set(frame["Annotation"]) == {"matmul", "elementwise"}
    assert (frame["Backend"] == "events").all() and (frame["NumRuns"] == 3).all()
    return results


if __name__ == "__main__":
    main()
