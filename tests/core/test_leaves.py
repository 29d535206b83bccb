"""The shared walk over nested arguments and outputs (nsight_core/runtime/leaves.py)."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np
import torch

from nsight_core.runtime.check import aliased
from nsight_core.runtime.leaves import array_leaves, leaves, walk

Pair = namedtuple("Pair", "a b")


class Frozen(Mapping[str, Any]):
    """A mapping that is no dict, as a task may hand one over."""

    def __init__(self, **items: Any) -> None:
        self._items = items

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


def test_walk_goes_depth_first_in_container_order_and_names_each_leaf() -> None:
    t, n = torch.ones(2), np.zeros(3)
    args = ((t, [n, 2.5], Pair(1, "s")), {"w": {"inner": t}, "k": None})
    assert [(p, type(v).__name__) for p, v in walk(args, "args")] == [
        ("args[0][0]", "Tensor"),
        ("args[0][1][0]", "ndarray"),
        ("args[0][1][1]", "float"),
        ("args[0][2][0]", "int"),
        ("args[0][2][1]", "str"),
        ("args[1]['w']['inner']", "Tensor"),
        ("args[1]['k']", "NoneType"),
    ]
    assert [p for p, _ in walk(args)] == [None] * 7
    assert list(leaves(args)) == [leaf for _, leaf in walk(args, "x")]


def test_dict_keys_are_never_walked_and_an_array_is_a_leaf() -> None:
    t = torch.ones(2)
    assert list(leaves({(t, t): 1})) == [1]
    n = np.arange(3)
    assert [v is t for v in leaves(t)] == [True]
    assert [v is n for v in leaves([n])] == [True]


def test_array_leaves_names_the_framework_and_skips_plain_values() -> None:
    t, n = torch.ones(2), np.zeros(3)
    found = [(p, kind) for p, _, kind in array_leaves({"a": [t, 3, "x"], "b": n}, "out")]
    assert found == [("out['a'][0]", "torch"), ("out['b']", "numpy")]


def test_other_mappings_are_containers_only_when_asked() -> None:
    t = torch.ones(2)
    for mapping in (Frozen(x=t), MappingProxyType({"x": t})):
        assert [p for p, _, _ in array_leaves(mapping, "m", any_mapping=True)] == ["m['x']"]
        assert list(array_leaves(mapping, "m")) == []


def test_aliasing_sees_an_input_inside_any_mapping() -> None:
    """The checks walk every Mapping, so an input handed over in one is still an input."""
    t = torch.ones(4)
    assert aliased(t[1:], ((Frozen(w=t),), {})) == ["input args[0]['w']"]
