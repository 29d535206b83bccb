"""Structural checks on a candidate's inputs and outputs: clones, mutation, aliasing.

Imported in the worker; like `compare.py`, it never imports torch, numpy or cupy itself
(arrays are recognised through ``sys.modules``). `clone_args` gives each callable its own
copies; `snapshot_inputs` + `mutated` find a candidate that wrote to an input; `aliased`
finds an output sharing memory with an input or the reference's output. Output comparison
(`compare_outputs`, `same_result`, tolerances) lives in `compare.py` and is re-exported
here for the worker, which reaches every check through this module. docs/correctness.md
explains each.

Inputs may be given as a ``(args, kwargs)`` pair (what the worker calls with), a tuple of
positional arguments, or a dict of keyword arguments; names in results read ``args[0]``
for positional and the keyword's name for keyword arguments.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from nsight_core.runtime.compare import (
    DEFAULT_TOLERANCES,
    OutputDiff,
    array_kind,
    compare_outputs,
    default_tolerance,
    same_result,
)
from nsight_core.runtime.leaves import array_leaves

__all__ = [
    "DEFAULT_TOLERANCES",
    "OutputDiff",
    "Snapshot",
    "aliased",
    "clone_args",
    "compare_outputs",
    "default_tolerance",
    "inputs_differ",
    "mutated",
    "same_result",
    "self_overlapping",
    "snapshot_inputs",
]

T = TypeVar("T")


def clone_args(args: T) -> T:
    """A deep copy of every tensor and array (containers rebuilt); other objects are shared."""
    return _clone(args)  # type: ignore[no-any-return]


def _clone(x: Any) -> Any:
    kind = array_kind(x)
    if kind == "torch":
        y = x.detach().clone()
        return y.requires_grad_(True) if x.requires_grad else y
    if kind == "numpy":
        return x.copy(order="K")
    if kind == "cupy":
        return x.copy(order="K")
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    if isinstance(x, tuple):
        items = [_clone(v) for v in x]
        return type(x)(*items) if hasattr(x, "_fields") else tuple(items)
    if isinstance(x, list):
        return [_clone(v) for v in x]
    return x


def _roots(args: Any) -> list[tuple[str, Any]]:
    """Named top-level arguments of the forms the module docstring lists."""
    if (
        isinstance(args, tuple)
        and len(args) == 2
        and isinstance(args[0], tuple | list)
        and isinstance(args[1], Mapping)
    ):
        positional, keywords = args
        return [(f"args[{i}]", v) for i, v in enumerate(positional)] + [
            (str(k), v) for k, v in keywords.items()
        ]
    if isinstance(args, Mapping):
        return [(str(k), v) for k, v in args.items()]
    if isinstance(args, tuple | list):
        return [(f"args[{i}]", v) for i, v in enumerate(args)]
    return [("args[0]", args)]


@dataclass(frozen=True)
class Snapshot:
    """Copies of the inputs as they were before a call, by argument name."""

    roots: tuple[tuple[str, Any], ...]


def snapshot_inputs(args: Any) -> Snapshot:
    """Copy every input (tensors and arrays deeply) so later writes to them can be found."""
    return Snapshot(tuple((name, _clone(value)) for name, value in _roots(args)))


def mutated(snapshot: Snapshot, args: Any) -> list[str]:
    """Names of the inputs (``args[0]``, ``x``, ``args[1][0]``) that changed since the snapshot."""
    now = dict(_roots(args))
    changed = []
    for name, before in snapshot.roots:
        if name not in now:
            changed.append(name)
            continue
        if _bitwise_same(before, now[name]):
            continue
        diff = same_result(before, now[name], path=name)
        if not diff.passed:
            changed.append(diff.path or name)
    return changed


def inputs_differ(before: Any, after: Any) -> list[str]:
    """Names of the inputs that differ between two argument structures: `mutated`'s
    comparison, on an original the caller kept untouched (the judge's own inputs)."""
    return mutated(Snapshot(tuple(_roots(before))), after)


def _bitwise_same(before: Any, after: Any) -> bool:
    """One kernel and one sync for the common case, an unchanged plain tensor (the full
    comparison launches several per input and syncs after each, which under ncu costs more
    than most calls it checks). False means only "not proven equal": the caller then
    compares fully."""
    torch = sys.modules.get("torch")
    if torch is None or type(before) is not torch.Tensor or type(after) is not torch.Tensor:
        return False
    if (before.shape, before.dtype, before.device) != (after.shape, after.dtype, after.device):
        return False
    return bool(torch.equal(before, after))


def _strided_extent(
    ptr: int, shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int
) -> tuple[int, int]:
    if any(n == 0 for n in shape):
        return ptr, ptr
    low = ptr + sum(s * (n - 1) for n, s in zip(shape, strides, strict=True) if s < 0)
    high = ptr + sum(s * (n - 1) for n, s in zip(shape, strides, strict=True) if s > 0) + itemsize
    return low, high


def _memory(kind: str, x: Any) -> tuple[str, int, int] | None:
    """(device, first byte, end byte) of the whole buffer behind ``x``; None if it has none."""
    if kind == "torch":
        if x.device.type == "meta":
            return None
        try:
            storage = x.untyped_storage()
            start, size = int(storage.data_ptr()), int(storage.nbytes())
        except (RuntimeError, NotImplementedError, TypeError):
            return None  # wrapper subclasses without storage
        return (str(x.device), start, start + size) if size and start else None
    root = x
    while array_kind(root.base) == kind:
        root = root.base
    if kind == "numpy":
        ptr, device = int(root.__array_interface__["data"][0]), "cpu"
    else:
        ptr, device = int(root.data.ptr), f"cuda:{root.device.id}"
    low, high = _strided_extent(ptr, tuple(root.shape), tuple(root.strides), root.itemsize)
    return (device, low, high) if high > low else None


def aliased(output: Any, inputs: Any, other_output: Any = None) -> list[str]:
    """What each output array shares memory with: ``input args[0]``, ``the reference's output``.

    Sharing is judged on whole buffers (torch storage, numpy/cupy base), so any view of an
    input counts, even one over elements the input itself does not show.
    """
    owners: list[tuple[str, tuple[str, int, int]]] = []
    for name, value in _roots(inputs):
        for path, leaf, kind in array_leaves(value, name, any_mapping=True):
            mem = _memory(kind, leaf)
            if mem is not None:
                owners.append((f"input {path}", mem))
    if other_output is not None:
        for _path, leaf, kind in array_leaves(other_output, "reference", any_mapping=True):
            mem = _memory(kind, leaf)
            if mem is not None:
                owners.append(("the reference's output", mem))
    found: list[str] = []
    for path, leaf, kind in array_leaves(output, "output", any_mapping=True):
        mem = _memory(kind, leaf)
        if mem is None:
            continue
        device, start, end = mem
        for owner, (o_device, o_start, o_end) in owners:
            if device == o_device and start < o_end and o_start < end:
                where = owner if path == "output" else f"{owner} (at {path})"
                if where not in found:
                    found.append(where)
    return found


def _element_strides(kind: str, x: Any) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(shape, strides in elements) of an array leaf; None where it has no strides."""
    try:
        if kind == "torch":
            return tuple(x.shape), tuple(int(s) for s in x.stride())
        itemsize = int(x.itemsize)
        return tuple(x.shape), tuple(int(s) // itemsize for s in x.strides)
    except (AttributeError, RuntimeError, TypeError, ZeroDivisionError):
        return None  # sparse, nested or wrapper tensors: no strides to read


def self_overlapping(output: Any) -> list[str]:
    """Output arrays whose elements share memory: more elements than their strides span.

    Such an array (``expand``, ``as_strided`` over a small buffer) holds an answer nobody
    wrote: the harness's copy into the judge's slot, after the window, writes every element
    and so does the call's work off the clock. The span is a lower bound on distinct
    elements, so only certain overlap is named (a layout too tangled to tell is left).
    """
    found: list[str] = []
    for path, leaf, kind in array_leaves(output, "output", any_mapping=True):
        dims = _element_strides(kind, leaf)
        if dims is None:
            continue
        shape, strides = dims
        count = 1
        for n in shape:
            count *= n
        if count == 0:
            continue
        span = 1 + sum((n - 1) * abs(s) for n, s in zip(shape, strides, strict=True))
        if span < count:
            found.append(
                f"{path} has {count} elements over memory for {span}: its elements share "
                "memory (a view such as expand or as_strided of a smaller buffer), so the "
                "harness's copy after the timed window would write the answer; return an "
                "output whose every element has its own memory"
            )
    return found
