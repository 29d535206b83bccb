"""Info collectors of the `@kernel` API (Nsight Python 1.1): real worker runs on CPU (events).

The caller's scopes (ONCE, CONFIG) run in this process, so their side effects are seen
here; the worker's scopes (RUN, ANNOTATION) run beside the function and come back as
columns.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import nsight_core as nsight
from nsight_core.exceptions import ProfilerException

pytestmark = pytest.mark.usefixtures("own_tempdir")

configs_seen: list[int] = []
_order = {"count": 0}


@nsight.experimental.collect(scope=nsight.CollectionScope.ONCE)
def version() -> str:
    return "v1.2"


@nsight.experimental.collect(scope="config")
def elements(n: int) -> int:
    configs_seen.append(n)
    return n * n


@nsight.experimental.collect(scope=nsight.CollectionScope.RUN)
def fails_at_8(n: int) -> int:
    if n == 8:
        raise ValueError("no reading at n=8")
    return n


@nsight.experimental.collect(scope=nsight.CollectionScope.RUN)
def label(n: int) -> str:
    return f"config_{n}"


@nsight.experimental.collect(scope=nsight.CollectionScope.ANNOTATION)
def order(annotation_name: str, *config: Any) -> int:
    _order["count"] += 1
    return _order["count"]


def per_element(time_ns: float, n: int) -> tuple[float, str]:
    return time_ns / n, "ns/element"


def two_regions(n: int) -> None:
    a = np.ones(n)
    with nsight.annotate("add"):
        a + a
    with nsight.annotate("mul"):
        a * a


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[nsight.ProfileResults, list[Any]]:
    """One call for the module's tests: 2 configs x 3 runs, after 2 warm-ups per config."""
    profiled_fn = nsight.analyze.kernel(
        configs=[(8,), (16,)],
        runs=3,
        warmup=2,
        backend="events",
        thermal_mode="off",
        verbosity=nsight.VerbosityLevel.SILENT,
        derive_metric=per_element,
        info_collectors=[version, elements, fails_at_8, label, order],
        output_prefix=f"{tmp_path_factory.mktemp('collectors')}/",
    )(two_regions)
    configs_seen.clear()
    with pytest.warns(RuntimeWarning, match="'fails_at_8' \\(run scope\\)") as warned:
        results = profiled_fn()
    return results, [w for w in warned if "Info collector" in str(w.message)]


def _row(frame: pd.DataFrame, annotation: str, n: int, metric: str) -> pd.Series:
    hits = frame[
        (frame["Annotation"] == annotation) & (frame["n"] == n) & (frame["Metric"] == metric)
    ]
    assert len(hits) == 1
    row: pd.Series = hits.iloc[0]
    return row


def test_each_scope_is_called_where_and_as_often_as_nsight_says(
    profiled: tuple[nsight.ProfileResults, list[Any]],
) -> None:
    results, _ = profiled
    frame = results.to_dataframe()
    assert configs_seen == [8, 16]  # CONFIG: once per config, in the caller
    assert (frame["version"] == "v1.2").all()  # ONCE: one column, constant
    # ANNOTATION: each profiled region in order, runs of config 8 then of 16; warm-up
    # calls (2 per config) collect nothing.
    for annotation, n, low, high in [("add", 8, 1, 5), ("mul", 8, 2, 6), ("add", 16, 7, 11)]:
        row = _row(frame, annotation, n, "events__time_duration")
        assert (row["order_Min"], row["order_Max"]) == (low, high)
    assert _row(frame, "mul", 16, "events__time_duration")["order_Avg"] == 10


def test_numbers_are_aggregated_over_runs_and_other_values_keep_the_first(
    profiled: tuple[nsight.ProfileResults, list[Any]],
) -> None:
    frame = profiled[0].to_dataframe()
    row = _row(frame, "add", 16, "events__time_duration")
    assert (row["elements_Avg"], row["elements_Std"]) == (256, 0)
    assert (row["elements_Min"], row["elements_Max"]) == (256, 256)
    assert row["label"] == "config_16" and "label_Avg" not in frame.columns
    assert row["fails_at_8_Avg"] == 16


def test_a_failing_collector_is_nan_where_it_failed_and_warns_once_per_call(
    profiled: tuple[nsight.ProfileResults, list[Any]],
) -> None:
    results, warned = profiled
    frame = results.to_dataframe()
    assert np.isnan(_row(frame, "add", 8, "events__time_duration")["fails_at_8_Avg"])
    assert len(warned) == 1 and "no reading at n=8" in str(warned[0].message)
    assert (frame["NumRuns"] == 3).all()  # the profile itself is untouched


def test_derived_rows_carry_the_collector_columns_too(
    profiled: tuple[nsight.ProfileResults, list[Any]],
) -> None:
    frame = profiled[0].to_dataframe()
    derived = frame[frame["Metric"] == "per_element"]
    assert len(derived) == 4 and (derived["Unit"] == "ns/element").all()
    assert (derived["version"] == "v1.2").all()
    assert list(derived["elements_Avg"]) == [64, 64, 256, 256]


def test_the_raw_frame_has_each_runs_own_value_and_the_file_nsights_shape(
    profiled: tuple[nsight.ProfileResults, list[Any]],
) -> None:
    results = profiled[0]
    raw = results.raw_dataframe()
    mul16 = raw[(raw["Annotation"] == "mul") & (raw["n"] == 16)]
    mul16 = mul16[mul16["Metric"] == "events__time_duration"]
    assert list(mul16["order"]) == [8, 10, 12] and list(mul16["label"]) == ["config_16"] * 3
    with open(results.artifacts["collected_info"], "rb") as f:
        records = pickle.load(f)
    assert [(r["config"], r["run_idx"]) for r in records] == [
        ((8,), 0), ((8,), 1), ((8,), 2), ((16,), 0), ((16,), 1), ((16,), 2)
    ]  # fmt: skip
    assert records[3]["once_info"] == {"version": "v1.2"}
    assert records[3]["config_info"] == {"elements": 256, "fails_at_8": 16, "label": "config_16"}
    assert [a["annotation"] for a in records[3]["annotation_info"]] == ["add", "mul"]


def test_stable_measurement_is_a_nullable_boolean_column() -> None:
    @nsight.analyze.kernel(configs=[(8,)], runs=1, backend="events", thermal_mode="off",
                           verbosity=nsight.VerbosityLevel.SILENT)  # fmt: skip
    def once(n: int) -> None:
        with nsight.annotate("sum"):
            np.ones(n).sum()

    frame = once().to_dataframe()
    assert str(frame["StableMeasurement"].dtype) == "boolean"
    assert frame["StableMeasurement"].isna().all()  # one run: no spread, so undefined


def test_collectors_given_as_objects_or_tuples_work_like_marked_functions() -> None:
    def host() -> str:
        return "here"

    @nsight.analyze.kernel(
        configs=[(4,)], runs=2, backend="events", thermal_mode="off",
        verbosity=nsight.VerbosityLevel.SILENT,
        info_collectors=[
            nsight.InfoCollector("Where", host, nsight.CollectionScope.ONCE),
            ("Twice", lambda n: 2 * n, "run"),
        ],
    )  # fmt: skip
    def f(n: int) -> None:
        with nsight.annotate("sum"):
            np.ones(n).sum()

    frame = f().to_dataframe()
    assert frame.loc[0, "Where"] == "here" and frame.loc[0, "Twice_Avg"] == 8


def test_collector_mistakes_are_refused_at_decoration_time() -> None:
    def unmarked(n: int) -> int:
        return n

    with pytest.raises(ValueError, match=r"missing @nsight\.experimental\.collect"):
        nsight.analyze.kernel(info_collectors=[unmarked])
    with pytest.raises(ValueError, match="Invalid collection scope 'sometimes'"):
        nsight.experimental.collect(unmarked, scope="sometimes")
    with pytest.raises(ValueError, match="name, callback, scope"):
        nsight.analyze.kernel(info_collectors=[("a", unmarked)])
    with pytest.raises(TypeError):
        nsight.analyze.kernel(info_collectors=[(1, unmarked, "run")])
    with pytest.raises(ProfilerException, match="Duplicate"):
        nsight.analyze.kernel(info_collectors=[version, ("version", unmarked, "run")])
    for reserved in ("AvgValue", "Geomean", "Trust"):
        with pytest.raises(ProfilerException, match="reserved"):
            nsight.analyze.kernel(info_collectors=[(reserved, unmarked, "run")])
    with pytest.raises(ProfilerException, match="parameter") as err:
        nsight.analyze.kernel(info_collectors=[("n", unmarked, "config")])(unmarked)
    assert err.value.error_class is nsight.ErrorClass.INVALID_REQUEST


def test_a_collector_file_left_by_an_earlier_call_is_never_read(tmp_path: Path) -> None:
    @nsight.analyze.kernel(
        configs=[(4,)], runs=1, backend="events", thermal_mode="off",
        verbosity=nsight.VerbosityLevel.SILENT, output_prefix=f"{tmp_path}/",
        info_collectors=[("Seen", lambda n: n, "run")],
    )  # fmt: skip
    def f(n: int) -> None:
        with nsight.annotate("sum"):
            np.ones(n).sum()

    first, second = f(), f()
    assert first.artifacts["collected_info"] != second.artifacts["collected_info"]
    with open(second.artifacts["collected_info"], "rb") as fh:
        assert len(pickle.load(fh)) == 1
