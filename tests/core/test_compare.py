"""Output comparison on numpy and CPU torch: tolerances, NaN/Inf placement, structure, chunks."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import torch

from nsight_core.runtime.check import clone_args
from nsight_core.runtime.compare import (
    DEFAULT_TOLERANCES,
    compare_outputs,
    default_tolerance,
    same_result,
)


def cmp(expected: Any, actual: Any, **tol: float) -> Any:
    return compare_outputs(expected, actual, atol=tol.get("atol"), rtol=tol.get("rtol"))


@pytest.mark.parametrize("make", [np.arange, torch.arange])
def test_equal_arrays_pass_with_zero_error(make: Any) -> None:
    x = make(12, dtype=np.float32 if make is np.arange else torch.float32).reshape(3, 4)
    diff = cmp(x, x + 0)
    assert diff.passed
    assert (diff.max_abs_error, diff.mismatch_count, diff.reason) == (0.0, 0, "")


def test_float32_within_default_tolerance_passes_and_beyond_fails() -> None:
    x = torch.linspace(1, 2, 100)
    assert cmp(x, x * (1 + 2e-6)).passed
    far = x.clone()
    far[57] += 1e-3
    diff = cmp(x, far)
    assert not diff.passed
    assert diff.kind == "values"
    assert diff.mismatch_count == 1
    assert diff.first_bad_index == [57]
    assert diff.max_abs_error == pytest.approx(1e-3, rel=1e-3)


def test_first_bad_index_is_a_multi_index_in_c_order() -> None:
    e = np.zeros((4, 5, 6))
    a = e.copy()
    a[2, 3, 1] = 1.0
    a[3, 0, 0] = 1.0
    diff = cmp(e, a)
    assert diff.first_bad_index == [2, 3, 1]
    assert diff.mismatch_count == 2


def test_non_contiguous_tensors_compare_in_logical_order() -> None:
    e = torch.arange(12.0).reshape(3, 4)
    a = e.t().contiguous().t()
    assert cmp(e, a).passed
    a = a.clone()
    a[1, 2] = -1
    assert cmp(e, a).first_bad_index == [1, 2]


def test_explicit_tolerances_override_the_dtype_defaults() -> None:
    e = np.ones(10, dtype=np.float32)
    assert not cmp(e, e + np.float32(1e-3)).passed
    assert cmp(e, e + np.float32(1e-3), atol=2e-3).passed
    assert cmp(e, e + np.float32(1e-3), rtol=2e-3).passed


def test_float16_default_catches_a_bfloat16_downgrade() -> None:
    x = torch.rand(1000, dtype=torch.float32) + 0.5
    assert not cmp(x, x.to(torch.bfloat16).to(torch.float32)).passed
    h = x.to(torch.bfloat16)
    assert cmp(h, h.clone()).passed


def test_integers_compare_exactly() -> None:
    e = np.arange(10, dtype=np.int64)
    a = e.copy()
    a[4] += 1
    diff = cmp(e, a)
    assert not diff.passed and diff.first_bad_index == [4]


def test_nan_in_the_same_place_passes_and_misplaced_nan_fails() -> None:
    e = torch.tensor([1.0, float("nan"), 3.0])
    assert cmp(e, e.clone()).passed
    diff = cmp(e, torch.tensor([float("nan"), 2.0, 3.0]))
    assert not diff.passed
    assert diff.mismatch_count == 2
    assert diff.first_bad_index == [0]


def test_infinity_must_match_in_place_and_sign() -> None:
    e = np.array([1.0, np.inf, -np.inf])
    assert cmp(e, e.copy()).passed
    assert not cmp(e, np.array([1.0, -np.inf, -np.inf])).passed
    assert not cmp(e, np.array([1.0, np.inf, 0.0])).passed
    assert not cmp(e, np.array([1.0, np.inf, np.nan])).passed


@pytest.mark.parametrize(
    ("expected", "actual", "kind"),
    [
        (torch.zeros(2, 3), torch.zeros(3, 2), "shape"),
        (torch.zeros(3), torch.zeros(3, dtype=torch.float64), "dtype"),
        (torch.zeros(3), torch.zeros(3, device="meta"), "device"),
        (np.zeros(3), torch.zeros(3), "type"),
        ((torch.zeros(1),), (torch.zeros(1), torch.zeros(1)), "structure"),
        ({"a": np.zeros(1)}, {"b": np.zeros(1)}, "structure"),
        ([np.zeros(1)], np.zeros(1), "type"),
        (1.0, 1, "dtype"),
        ("x", "y", "values"),
    ],
)
def test_structure_type_shape_dtype_device_mismatches_are_named(
    expected: Any, actual: Any, kind: str
) -> None:
    diff = cmp(expected, actual)
    assert not diff.passed
    assert diff.kind == kind
    assert diff.mismatch_count is None


def test_tensor_subclass_standing_in_for_the_result_fails_on_type() -> None:
    class Lazy(torch.Tensor):
        pass

    e = torch.ones(3)
    assert cmp(e, e.clone().as_subclass(Lazy)).kind == "type"


def test_nested_tuples_and_dicts_name_the_failing_leaf() -> None:
    e = (torch.ones(2), {"mean": np.zeros(3), "n": 3, "tag": "ok"})
    a = (torch.ones(2), {"mean": np.array([0.0, 0.5, 0.0]), "n": 3, "tag": "ok"})
    assert cmp(e, clone_args(e)).passed
    diff = cmp(e, a)
    assert not diff.passed
    assert diff.path == "output[1]['mean']"
    assert diff.first_bad_index == [1]


def test_python_and_numpy_scalars_compare_with_tolerance() -> None:
    assert cmp(1.0, 1.0 + 1e-9).passed
    assert not cmp(1.0, 1.1).passed
    assert cmp(np.float32(2.0), np.float32(2.0)).passed
    assert cmp(3, 3).passed and not cmp(3, 4).passed


def test_same_result_is_exact_but_treats_equal_nans_as_equal() -> None:
    a = torch.tensor([1.0, float("nan")])
    assert same_result(a, a.clone()).passed
    assert not same_result(a, a + torch.tensor([1e-7, 0.0])).passed


def test_default_tolerance_table_covers_float_kinds_and_exact_integers() -> None:
    assert default_tolerance("torch.float32") == DEFAULT_TOLERANCES["float32"]
    assert default_tolerance("float8_e4m3fnuz") == DEFAULT_TOLERANCES["float8_e4m3"]
    assert default_tolerance("int8") == default_tolerance("bool") == (0.0, 0.0)
    assert default_tolerance("float4_e2m1fn_x2") is None


def test_large_outputs_compare_in_chunks() -> None:
    e = torch.zeros(3_000_000)
    a = e.clone()
    a[-1] = 1.0
    diff = cmp(e, a)
    assert diff.first_bad_index == [2_999_999]
    assert diff.mismatch_count == 1


def test_torch_and_numpy_paths_give_the_same_verdict_on_the_same_values() -> None:
    rng = np.random.default_rng(7)
    expected = rng.standard_normal((64, 33)).astype(np.float32)
    actual = expected.copy()
    actual[3, 5] += 1e-2
    actual[40, 0] = np.nan
    expected[10, 10] = actual[10, 10] = np.inf
    host = compare_outputs(expected, actual, atol=None, rtol=None)
    device = compare_outputs(
        torch.from_numpy(expected), torch.from_numpy(actual), atol=None, rtol=None
    )
    assert not host.passed and not device.passed
    assert (host.mismatch_count, host.first_bad_index) == (
        device.mismatch_count,
        device.first_bad_index,
    )
    assert host.max_abs_error == pytest.approx(device.max_abs_error)
    assert host.max_rel_error == pytest.approx(device.max_rel_error)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_finite_chunks_get_the_numbers_the_device_rules_give(dtype: Any) -> None:
    """The host's shorter path for all-finite chunks (`_LeafStats._feed_finite`) against the
    torch rules, written apart: every number equal, not merely close."""
    rng = np.random.default_rng(11)
    for trial in range(20):
        expected = rng.standard_normal((37, 129)).astype(dtype)
        expected[rng.random(expected.shape) < 0.05] = 0  # |expected| = 0: no relative error
        noise = rng.standard_normal(expected.shape) * 10.0 ** -rng.integers(2, 6)
        actual = (expected + noise).astype(dtype)
        actual[rng.random(expected.shape) < 0.1] = expected[0, 0]  # some far off
        for atol, rtol in [(None, None), (1e-3, 1e-3), (0.0, 0.0)]:
            host = compare_outputs(expected, actual, atol=atol, rtol=rtol)
            device = compare_outputs(
                torch.from_numpy(expected), torch.from_numpy(actual), atol=atol, rtol=rtol
            )
            got = (host.mismatch_count, host.first_bad_index, host.max_abs_error)
            assert got == (
                device.mismatch_count,
                device.first_bad_index,
                device.max_abs_error,
            ), (trial, atol, rtol)
            assert host.max_rel_error == device.max_rel_error
            assert host.passed == device.passed


def test_importing_compare_does_not_import_numpy_or_torch() -> None:
    code = (
        "import sys, nsight_core.runtime.compare\n"
        "print(sorted(m for m in ('numpy', 'torch', 'cupy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
