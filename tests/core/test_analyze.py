"""``import nsight_core as nsight`` runs Nsight Python programs: names, plot, ignore_failures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nsight_core as nsight

# A `@kernel` job without an output_prefix writes to the system temporary directory.
pytestmark = pytest.mark.usefixtures("own_tempdir")


def test_nsight_pythons_import_surface_is_there() -> None:
    assert nsight.analyze.kernel is nsight.kernel
    assert [v.value for v in nsight.VerbosityLevel] == [0, 3, 4]
    assert issubclass(nsight.exceptions.CoolingTimeoutError, nsight.exceptions.ThermalControlError)
    assert issubclass(nsight.exceptions.NCUNotAvailableError, nsight.exceptions.ProfilerException)
    assert isinstance(nsight.utils.CUDA_CORE_AVAILABLE, bool)
    with nsight.analyze.ignore_failures():
        raise RuntimeError("swallowed, as in Nsight Python")


def test_bad_plot_options_are_refused_at_decoration_time() -> None:
    with pytest.raises(ValueError, match="plot_type"):
        nsight.analyze.plot(plot_type="pie")
    with pytest.raises(ValueError, match="show_aggregate"):
        nsight.analyze.plot(show_aggregate="median")


def test_plot_draws_a_png_and_keeps_the_results_when_the_metric_is_ambiguous(
    tmp_path: Path,
) -> None:
    seen: list[Any] = []

    def rate(t: float, n: int) -> tuple[float, str]:
        return n / t, "elements/ns"

    @nsight.analyze.plot(str(tmp_path / "p.png"), "rate", plot_type="bar",
                         show_aggregate="avg", plot_callback=seen.append)  # fmt: skip
    @nsight.analyze.kernel(configs=[(64,), (128,)], runs=3, backend="events", derive_metric=rate,
                           thermal_mode="off", verbosity=nsight.VerbosityLevel.SILENT)  # fmt: skip
    def sums(n: int) -> None:
        a = np.ones(n)
        with nsight.annotate("sum"):
            a.sum()
        with nsight.annotate("cumsum"):
            a.cumsum()

    results = sums()
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    assert results.artifacts["plot"] == str(tmp_path / "p.png")
    fig = seen[0]
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["n=64", "n=128", "Avg"]
    assert fig.axes[0].get_ylabel() == "rate [elements/ns] (avg of 3 runs)"

    with pytest.raises(ValueError, match=r"Cannot visualize multiple metrics \(2 > 1\)") as err:
        nsight.analyze.plot(str(tmp_path / "q.png"))(lambda: results)()
    assert err.value.results is results  # type: ignore[attr-defined]
    assert not (tmp_path / "q.png").exists()


def test_plot_names_points_it_could_not_draw(tmp_path: Path) -> None:
    seen: list[Any] = []

    @nsight.analyze.plot(str(tmp_path / "p.png"), plot_callback=seen.append)
    @nsight.analyze.kernel(configs=[(8,), (16,)], runs=2, backend="events", thermal_mode="off",
                           verbosity=nsight.VerbosityLevel.SILENT)  # fmt: skip
    def flaky(n: int) -> None:
        with nsight.annotate("k", ignore_failures=True):
            if n == 16:
                raise RuntimeError("no")

    flaky()
    texts = " ".join(t.get_text() for t in seen[0].texts)
    assert "not drawn (no valid run): k @ n=16 (runtime_error)" in texts
