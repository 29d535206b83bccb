"""Structural checks on numpy and CPU torch: clones, input mutation, aliasing."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import torch

from nsight_core.runtime import check, compare
from nsight_core.runtime.check import aliased, clone_args, mutated, snapshot_inputs


def test_clone_args_copies_arrays_and_keeps_scalars() -> None:
    t, n = torch.ones(3), np.ones(3)
    args: tuple[tuple[Any, ...], dict[str, Any]] = ((t, [n, 2.5]), {"k": t, "s": "name"})
    c_pos, c_kw = clone_args(args)
    assert c_pos[0] is not t and torch.equal(c_pos[0], t)
    assert c_pos[1][0] is not n and c_pos[1][1] == 2.5
    assert c_kw["s"] == "name"
    c_pos[0].add_(1)
    assert torch.equal(t, torch.ones(3))


def test_clone_keeps_requires_grad_without_sharing_the_graph() -> None:
    t = torch.ones(2, requires_grad=True)
    c = clone_args(t)
    assert c.requires_grad and c.is_leaf


def test_mutation_of_an_input_is_detected_by_name() -> None:
    args: tuple[tuple[Any, ...], dict[str, Any]] = (
        (torch.ones(4), np.zeros(3)),
        {"scale": torch.ones(2), "nested": [np.ones(2)]},
    )
    snap = snapshot_inputs(args)
    assert mutated(snap, args) == []
    args[0][1][2] = 5.0
    args[1]["nested"][0][0] = 7.0
    assert mutated(snap, args) == ["args[1]", "nested[0]"]


def test_writing_the_same_values_back_is_not_mutation_and_nan_inputs_are_stable() -> None:
    x = torch.tensor([1.0, float("nan")])
    snap = snapshot_inputs((x,))
    x.copy_(x.clone())
    assert mutated(snap, (x,)) == []


def test_returning_the_input_or_a_view_of_it_is_aliasing() -> None:
    x = torch.arange(8.0)
    inputs: tuple[tuple[Any, ...], dict[str, Any]] = ((x,), {})
    assert aliased(x, inputs) == ["input args[0]"]
    assert aliased(x.view(2, 4)[1], inputs) == ["input args[0]"]
    assert aliased((x.clone(), x[:2]), inputs) == ["input args[0] (at output[1])"]
    assert aliased(x.clone(), inputs) == []


def test_numpy_views_and_cross_framework_sharing_are_aliasing() -> None:
    x = np.arange(10.0)
    assert aliased(x[::2], {"x": x}) == ["input x"]
    assert aliased(x[5:], {"x": x[:5]}) == ["input x"]
    assert aliased(torch.from_numpy(x), {"x": x}) == ["input x"]
    assert aliased(x.copy(), {"x": x}) == []


def test_sharing_memory_with_the_reference_output_is_aliasing() -> None:
    ref = torch.ones(4)
    assert aliased(ref, ((torch.zeros(4),), {}), ref) == ["the reference's output"]
    assert aliased(ref.clone(), ((torch.zeros(4),), {}), ref) == []


def test_importing_check_does_not_import_numpy_or_torch() -> None:
    code = (
        "import sys, nsight_core.runtime.check\n"
        "print(sorted(m for m in ('numpy', 'torch', 'cupy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_check_still_offers_the_comparison_the_worker_calls_through_it() -> None:
    # worker.py reaches every check as `chk.<name>`; the comparison moved to compare.py.
    for name in ("compare_outputs", "same_result", "OutputDiff", "default_tolerance"):
        assert getattr(check, name) is getattr(compare, name)
    assert sorted(check.__all__) == check.__all__
