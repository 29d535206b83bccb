"""The `@kernel` API: Nsight-Python-style validation, and real worker runs on CPU (events)."""

from __future__ import annotations

import numpy as np
import pytest

from nsight_core import ErrorClass, NsightCoreError, annotate, kernel
from nsight_core.api import sanitize_configs


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
    with pytest.raises(ValueError, match="reducer name"):
        kernel(combine_kernel_metrics=max)  # type: ignore[call-overload]


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
