"""The `@kernel` API: Nsight-Python-style validation, and real worker runs on CPU (events)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from nsight_core import ErrorClass, NsightCoreError, VerbosityLevel, annotate, exceptions, kernel
from nsight_core.nsight.api import sanitize_configs

# A `@kernel` job without an output_prefix writes to the system temporary directory.
pytestmark = pytest.mark.usefixtures("own_tempdir")


def two(a: int, b: int = 2, *, c: int = 3) -> None: ...


def test_short_configs_are_padded_and_keyword_only_parameters_go_by_keyword() -> None:
    assert sanitize_configs(two, [(1,), (4,)]) == [((1, 2), {"c": 3}), ((4, 2), {"c": 3})]


def test_scalar_configs_work_for_one_parameter_functions() -> None:
    def one(n: int) -> None: ...

    assert sanitize_configs(one, [8, 16]) == [((8,), {}), ((16,), {})]


@pytest.mark.parametrize(
    "configs",
    [None, [], [(1, 2, 3, 4)], [(1,), (1, 2)], 5],
    ids=["none", "empty", "too-many", "ragged", "not-iterable"],
)
def test_bad_configs_are_invalid_requests(configs: object) -> None:
    with pytest.raises(NsightCoreError) as err:
        sanitize_configs(two, configs)  # type: ignore[arg-type]
    assert err.value.error_class is ErrorClass.INVALID_REQUEST


def test_bad_settings_are_refused_at_decoration_time() -> None:
    with pytest.raises(ValueError, match="clock_control"):
        kernel(clock_control="fast")
    with pytest.raises(ValueError, match="runs"):
        kernel(runs=0)
    with pytest.raises(ValueError, match="Invalid reducer"):
        kernel(combine_kernel_metrics="median")
    kernel(combine_kernel_metrics=lambda x, y: x + y)  # Nsight Python's form is accepted


def test_configs_at_decoration_and_call_time_are_refused() -> None:
    @kernel(configs=[(1,)], backend="events")
    def f(n: int) -> None: ...

    with pytest.raises(NsightCoreError) as err:
        f(configs=[(2,)])
    assert err.value.error_class is ErrorClass.INVALID_REQUEST


@kernel(configs=[(32,), (64,)], runs=3, backend="events")
def regions(n: int) -> None:
    a = np.ones((n, n))
    with annotate("ok"):
        a @ a
    with annotate("fails", ignore_failures=True):
        if n == 64:
            raise RuntimeError("planned failure at n=64")
        a + a


def test_a_failing_region_is_null_with_its_reason_and_the_others_go_on() -> None:
    results = regions()
    by_key = {(r.Annotation, r.Params["n"]): r for r in results.rows}
    assert by_key[("ok", 32)].NumRuns == by_key[("ok", 64)].NumRuns == 3
    assert by_key[("fails", 32)].NumRuns == 3
    failed = by_key[("fails", 64)]
    assert failed.NumRuns == 0 and failed.AvgValue is None
    assert failed.ErrorClass is ErrorClass.RUNTIME_ERROR and failed.Trust == "failed"
    reported = [f for f in results.failures if f.Annotation == "fails"]
    assert len(reported) == 3 and all("planned failure" in f.Error for f in reported)
    frame = results.to_dataframe()
    assert list(frame.columns[:2]) == ["Annotation", "n"]


def test_normalize_against_an_unknown_annotation_is_an_invalid_request() -> None:
    @kernel(configs=[(8,)], backend="events", normalize_against="nope")
    def f(n: int) -> None:
        with annotate("a"):
            np.ones(n).sum()

    with pytest.raises(NsightCoreError) as err:
        f()
    assert err.value.error_class is ErrorClass.INVALID_REQUEST


def test_a_function_without_annotations_is_no_kernels() -> None:
    @kernel(configs=[(8,)], backend="events")
    def f(n: int) -> None:
        np.ones(n).sum()

    with pytest.raises(NsightCoreError) as err:
        f()
    assert err.value.error_class is ErrorClass.NO_KERNELS


# --- Nsight Python's rules and names ----------------------------------------------------


def one(n: object) -> None: ...


def test_a_tuple_config_of_a_one_parameter_function_is_its_values_not_one_argument() -> None:
    assert sanitize_configs(one, [(100,), 200, (300,)]) == [
        ((100,), {}),
        ((200,), {}),
        ((300,), {}),
    ]
    assert sanitize_configs(one, [((2048, 512),)]) == [(((2048, 512),), {})]
    with pytest.raises(
        exceptions.ProfilerException, match=r"Configs have 2 arguments, but function expects 1"
    ) as err:
        sanitize_configs(one, [(2048, 512)])
    assert "((a, b),)" in err.value.hint
    with pytest.raises(exceptions.ProfilerException, match=r"Found lengths: \[2, 1, 2\]"):
        sanitize_configs(one, [(1, 2), 3, (4, 5)])


def test_nsight_exceptions_are_nsight_core_errors_with_a_class() -> None:
    with pytest.raises(NsightCoreError) as err:
        sanitize_configs(two, [(1,), (1, 2)])
    assert isinstance(err.value, exceptions.ProfilerException)
    assert err.value.error_class is ErrorClass.INVALID_REQUEST
    assert (
        str(err.value)
        == "All configs must have the same number of arguments. Found lengths: [1, 2]"
    )
    bad = exceptions.InvalidMetricsError(["foo__bar"])
    assert isinstance(bad, ValueError) and bad.error_class is ErrorClass.INVALID_METRIC
    assert str(bad).startswith(
        "Invalid value ['foo__bar'] for 'metrics' parameter for nsight.analyze.kernel()"
    )


def test_thermal_and_metric_settings_are_checked_at_decoration_time() -> None:
    with pytest.raises(
        ValueError, match=r"thermal_cont \(10°C\) must be greater than thermal_wait \(10°C\)"
    ):
        kernel(thermal_wait=10, thermal_cont=10)
    with pytest.raises(ValueError, match="thermal_mode"):
        kernel(thermal_mode="sometimes")
    with pytest.raises(ValueError, match="Invalid value"):
        kernel(metrics=[])


def test_an_unknown_metric_name_is_nsights_value_error_before_anything_runs() -> None:
    @kernel(configs=[(8,)], metrics=["gpu__time_duration.sum", "dram__bogus_metric.sum"])
    def f(n: int) -> None: ...

    with pytest.raises(ValueError, match=r"Invalid value \['dram__bogus_metric.sum'\]") as err:
        f()
    assert isinstance(err.value, exceptions.InvalidMetricsError)


def test_a_generator_of_configs_is_read_at_the_first_call_only() -> None:
    def gen() -> Iterator[tuple[int]]:
        yield from [(8,), (16,)]

    configs = gen()

    @kernel(configs=configs, backend="events", runs=1, verbosity=VerbosityLevel.SILENT)
    def unused(n: int) -> None: ...

    # Nsight Python's test hands the same generator to a second decorator and calls only that.
    @kernel(configs=configs, backend="events", runs=1, verbosity=VerbosityLevel.SILENT)
    def used(n: int) -> None:
        with annotate("add"):
            np.ones(n).sum()

    frame = used().to_dataframe()
    assert list(frame["n"]) == [8, 16]


def test_derive_metric_with_the_wrong_arity_is_refused_before_running() -> None:
    @kernel(configs=[(8,)], backend="events", derive_metric=lambda t: t)
    def f(n: int) -> None: ...

    with pytest.raises(ValueError, match=r"expects 2 parameters \(1 metric values \+ 1 configs\)"):
        f()


def scale(time_ns: float, shape: tuple[int, int]) -> float:
    return shape[0] * shape[1] / time_ns


@kernel(
    configs=[((16, 16),), ((32, 32),)],
    runs=3,
    backend="events",
    derive_metric=scale,
    thermal_mode="off",
    verbosity=VerbosityLevel.SILENT,
)
def shaped(shape: tuple[int, int]) -> None:
    a = np.ones(shape)
    with annotate("sum"):
        a.sum()


def test_tuple_arguments_stay_tuples_and_derived_rows_follow_the_measured_ones(
    tmp_path: Path,
) -> None:
    with pytest.warns(UserWarning, match="Derived metric 'scale' does not have a unit"):
        results = shaped()
    frame = results.to_dataframe()
    # Nsight Python's order: every measured row first, then the derived rows.
    assert list(frame["shape"]) == [(16, 16), (32, 32)] * 2
    assert list(frame["Metric"]) == ["events__time_duration"] * 2 + ["scale"] * 2
    assert (frame["NumRuns"] == 3).all() and (frame["ThermalGuard"] == "off").all()
    assert results.rows[0].Params == {"shape": [16, 16]}  # JSON form for MCP clients


def test_output_files_follow_nsights_names_and_count_calls(tmp_path: Path) -> None:
    @kernel(configs=[(8,)], runs=2, backend="events", output_prefix=f"{tmp_path}/out/run_",
            output_csv=True, verbosity=VerbosityLevel.SILENT)  # fmt: skip
    def f(n: int) -> None:
        with annotate("a"):
            np.ones(n).sum()

    f()
    f()
    names = sorted(p.name for p in (tmp_path / "out").iterdir() if p.suffix == ".csv")
    assert names == [
        "run_processed_data-f-0.csv", "run_processed_data-f-1.csv",
        "run_profiled_data-f-0.csv", "run_profiled_data-f-1.csv",
    ]  # fmt: skip
    raw = (tmp_path / "out" / "run_profiled_data-f-0.csv").read_text().splitlines()
    assert raw[0].startswith("Annotation,n,Metric,Run,Value,Unit") and len(raw) == 3


def test_the_thermal_guard_reports_what_it_saw_in_every_row() -> None:
    @kernel(configs=[(8,), (16,)], runs=2, backend="events", verbosity=VerbosityLevel.SILENT)
    def f(n: int) -> None:
        with annotate("a"):
            np.ones(n).sum()

    results = f()
    guard = {r.ThermalGuard for r in results.rows}
    # No NVML on a CPU host: "unavailable", with the reason in the message; on a GPU: a reading.
    assert guard <= {"unavailable", "ok", "waited"} and len(guard) == 1
    if guard == {"unavailable"}:
        assert "thermal guard: NVML" in results.result.message
    else:
        assert all(r.GpuTempC is not None for r in results.rows)
    assert all(r.ThermalWaitS is not None for r in results.rows)
    assert "thermal_log" in results.artifacts


def test_every_backend_a_request_takes_is_a_kernel_backend_too() -> None:
    """`@kernel(backend="cupti")` was refused ("Expected 'ncu' or 'events'") while
    `activate(Tool.CUPTI)` worked: the decorator and the request take the same backends."""
    from nsight_core.request import BACKENDS

    for name in BACKENDS:
        kernel(configs=[(1,)], backend=name)  # accepted at decoration
    with pytest.raises(ValueError, match="Invalid backend 'nvprof'"):
        kernel(backend="nvprof")
