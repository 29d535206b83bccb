"""The call's guard (contestant/call_guard.py) on what the harness reads after a call: the
output's arrays and containers, and the inputs it checks. As in test_call_guard.py, real
candidate code runs, and both sides are checked: what of it ran, what the harness got."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterator
from typing import Any, ClassVar

import torch

from nsight_core.contestant.call_guard import MAX_DEPTH, CallGuard, NotRead
from nsight_core.runtime.check import aliased, snapshot_inputs
from tests.core.test_call_guard import _run, guard

__all__ = ["guard"]  # the fixture, shared with test_call_guard.py


# -- arrays: no attribute of their own reaches the harness --------------------------------


def test_an_attribute_that_shadows_a_tensor_method_is_left_behind_and_named(
    guard: CallGuard,
) -> None:
    ran: list[str] = []
    made: list[torch.Tensor] = []

    def candidate() -> torch.Tensor:
        out = torch.zeros(2, 4)
        made.append(out)

        def detach() -> torch.Tensor:
            ran.append("detach")
            out.fill_(1.0)
            return torch.Tensor.detach(out)

        out.detach = detach  # type: ignore[method-assign]
        return out

    g, settled = _run(guard, candidate)
    snap = snapshot_inputs(((settled,), {}))  # calls detach(), as the timers' snapshot does
    g.release()
    assert ran == [] and float(snap.roots[0][1][0].sum()) == 0.0
    assert type(settled) is torch.Tensor and settled.__dict__ == {}
    assert settled is not made[0] and settled.data_ptr() == made[0].data_ptr()
    assert [f for f in g.findings if "shadow its methods (detach)" in f] != []
    assert g.findings[0].startswith("output has attributes")


def test_an_attribute_of_its_own_is_left_behind_without_a_finding(guard: CallGuard) -> None:
    out = torch.arange(6.0)

    def candidate() -> torch.Tensor:
        out.my_note = "computed in 2 kernels"  # type: ignore[attr-defined]
        return out

    g, settled = _run(guard, candidate)
    g.release()
    assert g.findings == []
    assert settled is not out and settled.data_ptr() == out.data_ptr()
    assert not hasattr(settled, "my_note")


def test_an_instance_dict_of_a_dict_subclass_is_read_through_dicts_slots(
    guard: CallGuard,
) -> None:
    ran: list[str] = []

    class Spy(dict[str, Any]):
        def __iter__(self) -> Iterator[str]:
            ran.append("iter")
            return super().__iter__()

        def keys(self) -> Any:
            ran.append("keys")
            return super().keys()

    def candidate() -> torch.Tensor:
        out = torch.zeros(3)
        out.__dict__ = Spy(clone=lambda: None)
        return out

    g, settled = _run(guard, candidate)
    g.release()
    assert ran == [] and settled.__dict__ == {}
    assert any("shadow its methods (__dict__, clone)" in f for f in g.findings)


def test_attributes_on_a_tensors_storage_are_named(guard: CallGuard) -> None:
    def candidate() -> torch.Tensor:
        out = torch.zeros(3)
        out.untyped_storage().data_ptr = lambda: 0  # type: ignore[method-assign]
        return out

    g, _ = _run(guard, candidate)
    g.release()
    assert any(
        f.startswith("the storage of output has attributes that shadow its methods (data_ptr)")
        for f in g.findings
    )


def test_a_tensor_subclass_output_is_left_for_the_judges_type_check(guard: CallGuard) -> None:
    class Deferred(torch.Tensor):
        pass

    def candidate() -> torch.Tensor:
        return torch.zeros(3).as_subclass(Deferred)

    g, settled = _run(guard, candidate)
    g.release()
    assert type(settled) is Deferred and g.findings == []


# -- containers: rebuilt through the base types' slots ------------------------------------


class _LazyTuple(tuple[Any, ...]):
    calls: ClassVar[list[str]] = []

    def __iter__(self) -> Iterator[Any]:
        self.calls.append("iter")
        return super().__iter__()

    def __getitem__(self, i: Any) -> Any:
        self.calls.append("getitem")
        return super().__getitem__(i)

    def __len__(self) -> int:
        self.calls.append("len")
        return super().__len__()


class _LazyList(list[Any]):
    def __iter__(self) -> Iterator[Any]:
        _LazyTuple.calls.append("list iter")
        return super().__iter__()


class _Key(str):
    def __hash__(self) -> int:
        _LazyTuple.calls.append("hash")
        return super().__hash__()

    def __eq__(self, other: object) -> bool:
        _LazyTuple.calls.append("eq")
        return super().__eq__(other)


class _LazyDict(dict[str, Any]):
    def items(self) -> Any:
        _LazyTuple.calls.append("items")
        return super().items()

    def __iter__(self) -> Iterator[str]:
        _LazyTuple.calls.append("dict iter")
        return super().__iter__()


def test_container_subclasses_are_rebuilt_as_plain_ones_without_running_their_code(
    guard: CallGuard,
) -> None:
    _LazyTuple.calls = []
    a, b, c = torch.zeros(2), torch.ones(2), torch.full((2,), 2.0)
    Pair = namedtuple("Pair", "low high")

    def candidate() -> Any:
        inner = _LazyDict({_Key("mean"): b})
        out = _LazyTuple((a, _LazyList([inner, Pair(c, 1)]), "label"))
        _LazyTuple.calls.clear()  # making them hashed the key: only what follows counts
        return out

    g, settled = _run(guard, candidate)
    snapshot_inputs(((settled,), {}))
    aliased(settled, ((), {}))
    g.release()
    assert _LazyTuple.calls == []
    assert type(settled) is tuple and type(settled[1]) is list
    mean = settled[1][0]
    assert type(mean) is dict and [type(k) for k in mean] == [str] and mean["mean"] is b
    assert type(settled[1][1]) is tuple and settled[1][1][0] is c  # a named tuple crosses as one
    assert settled[0] is a and g.findings == []  # nothing to name: the output is as it was


def test_a_metaclass_of_the_candidates_is_never_asked_to_compare_or_hash(
    guard: CallGuard,
) -> None:
    asked: list[str] = []

    class Meta(type):
        def __eq__(cls, other: object) -> bool:
            asked.append("eq")
            return False

        def __hash__(cls) -> int:
            asked.append("hash")
            return 1

    class Row(tuple[Any, ...], metaclass=Meta):
        pass

    class Key(metaclass=Meta):
        pass

    odd: dict[Any, int] = {Key(): 1}  # the key's class is hashed here ...
    keyed = {"k": Row((torch.zeros(2),)), "odd": odd}
    asked.clear()  # ... before the call: only what follows counts
    g, settled = _run(guard, lambda: keyed)
    g.release()
    assert asked == []
    assert type(settled["k"]) is tuple and settled["odd"] == NotRead("dict")


def test_plain_outputs_are_handed_over_as_they_are(guard: CallGuard) -> None:
    x, y = torch.zeros(2), torch.ones(3)
    out = (x, [y, {"k": 1.5}], None)
    g, settled = _run(guard, lambda: out)
    assert settled is out and g.settle(settled) is settled  # idempotent: the timers call it
    g.release()
    assert g.findings == []


def test_parts_the_harness_cannot_read_without_candidate_code_are_stood_for(
    guard: CallGuard,
) -> None:
    hashed: list[str] = []

    class Key:
        def __hash__(self) -> int:
            hashed.append("hash")
            return 1

    deep: Any = torch.zeros(1)
    for _ in range(MAX_DEPTH + 2):
        deep = [deep]
    keyed = {Key(): torch.zeros(1)}
    hashed.clear()  # made, the key was hashed once: only what follows counts
    g, settled = _run(guard, lambda: (keyed, deep))
    g.release()
    assert hashed == [] and settled[0] == NotRead("dict")
    inner = settled[1]
    for _ in range(MAX_DEPTH - 1):
        inner = inner[0]
    assert inner == NotRead("list")


# -- inputs: the harness's checks after the call read them too ----------------------------


def test_inputs_the_call_tampered_with_are_named_and_left_behind(guard: CallGuard) -> None:
    ran: list[str] = []

    class Evil(torch.Tensor):
        pass

    x, y, w = torch.zeros(4), torch.zeros(4), torch.zeros(4)
    nested: list[Any] = [torch.zeros(1)]

    def candidate() -> torch.Tensor:
        def storage() -> Any:
            ran.append("storage")
            return torch.Tensor.untyped_storage(x)

        x.untyped_storage = storage  # type: ignore[method-assign]
        y.__class__ = Evil
        nested.append(_LazyTuple((torch.zeros(1),)))
        return torch.zeros(4)

    g, out = _run(guard, candidate)
    args, kwargs = g.settle_inputs((x, y, nested), {"w": w})
    aliased(out, (args, kwargs))
    g.release()
    assert ran == [] and args[0] is not x and args[2][1] == (nested[1][0],)
    assert type(args[2][1]) is tuple and kwargs["w"] is w
    assert any(f.startswith("input args[0] has attributes that shadow") for f in g.findings)
    assert any(f.startswith("input args[1]'s class was changed to") for f in g.findings)


def test_outputs_whose_elements_share_memory_are_named_and_own_layouts_are_not() -> None:
    import numpy as np

    from nsight_core.runtime.check import self_overlapping

    x = torch.arange(12.0).reshape(3, 4)
    assert self_overlapping(x) == [] and self_overlapping(x.t()) == []
    assert self_overlapping(x[:, ::2]) == [] and self_overlapping(torch.empty(0, 4)) == []
    (found,) = self_overlapping(x[:1].expand(3, 4))
    assert found.startswith("output has 12 elements over memory for 4")
    small = torch.zeros(7)
    assert self_overlapping((x, small.as_strided((4, 4), (1, 1))))[0].startswith("output[1]")
    assert self_overlapping(np.broadcast_to(np.ones(4), (3, 4)))
    assert self_overlapping(np.ones((3, 4))[::-1]) == []
