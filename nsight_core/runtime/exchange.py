"""Arguments and outputs across the judge/contestant boundary, through shared slots.

The judge owns every slot: CUDA memory shared by IPC (torch's CUDA tensor sharing) for
arrays on the GPU, a file mapped into both processes for arrays on the host. Arrays cross
as bytes in a slot plus a JSON description (`messages.ArrayNode`); the comparison stays on
the judge's side, on the device where the expected output lives.

- `Arena` (judge): writes fresh inputs into input slots, names output slots sized like the
  expected output's arrays, and rebuilds the contestant's output from its description.
- `SlotTable` (contestant): attaches slots, makes *new* arrays from them for every call (so
  a candidate never holds memory the judge reads), and copies its outputs into slots.

CUDA slots come from a memory pool of their own where torch has one (`torch.cuda.MemPool`),
else they are allocated at whole-segment sizes, so the segment a contestant maps never holds
the judge's expected outputs.

An array's bytes into a slot and back out of one, whatever its framework and device, are
`slot_bytes`: this module describes arguments and outputs and owns the slots.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import mmap
import pickle
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from nsight_core.runtime.compare import array_kind
from nsight_core.runtime.leaves import array_leaves
from nsight_core.runtime.messages import (
    ArrayNode,
    DictNode,
    Node,
    OpaqueNode,
    PickleNode,
    SeqNode,
    SlotSpec,
    ValueNode,
)
from nsight_core.runtime.slot_bytes import (
    array_nbytes,
    copy_in,
    data_ptr,
    dense_stride,
    device_of,
    rebuild_array,
    xor_bytes,
    xor_tail,
)

_SEGMENT_ROUND = 2 << 20
_MIN_OWN_SEGMENT = 12 << 20
"""torch's caching allocator gives an allocation above 10 MiB a segment of its own, rounded
to 2 MiB; a slot that size shares its segment with nothing else of the judge's."""

_PLAIN = (bool, int, float, str, type(None))


def type_name(x: object) -> str:
    t = type(x)
    return f"{t.__module__}.{t.__qualname__}"


def _array_node(
    x: Any,
    fw: Literal["torch", "numpy", "cupy"],
    slot: int | None,
    nbytes: int,
    *,
    stride: list[int] | None = None,
    requires_grad: bool = False,
) -> ArrayNode:
    """An array as the other side rebuilds it, described alike for the judge's inputs and
    the contestant's outputs; only inputs carry strides and autograd to recreate."""
    return ArrayNode(
        framework=fw,
        type_name=type_name(x),
        dtype=str(x.dtype).removeprefix("torch."),
        shape=list(x.shape),
        stride=stride,
        device=device_of(x, fw),
        slot=slot,
        nbytes=nbytes,
        requires_grad=requires_grad,
    )


def _value_node(x: Any) -> ValueNode:
    if isinstance(x, float) and x != x:
        return ValueNode(type_name=type_name(x), special="nan")
    if isinstance(x, float) and x in (float("inf"), float("-inf")):
        return ValueNode(type_name=type_name(x), special="inf" if x > 0 else "-inf")
    return ValueNode(type_name=type_name(x), value=x)


def _value_of(node: ValueNode) -> Any:
    if node.special is not None:
        return float(node.special)
    return node.value


@dataclass
class _Slot:
    spec: SlotSpec
    buf: Any
    """The slot's bytes: a uint8 torch CUDA tensor, or a uint8 numpy array over the map."""
    mm: mmap.mmap | None = None


class Arena:
    """The judge's slots. One arena per job; slots are reused for equal keys and sizes."""

    def __init__(self, directory: Path, *, cuda_ipc: bool = True) -> None:
        self.cuda_ipc = cuda_ipc
        """Share CUDA arrays by IPC; when off (or when IPC fails) they cross in host slots."""
        self.notes: list[str] = []
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self._slots: dict[int, _Slot] = {}
        self._by_key: dict[tuple[str, ...], int] = {}
        self._pool: Any = None

    def _alloc_cuda(self, nbytes: int) -> Any:
        torch = sys.modules["torch"]
        size = max(-(-nbytes // _SEGMENT_ROUND) * _SEGMENT_ROUND, _MIN_OWN_SEGMENT)
        pool_cls = getattr(torch.cuda, "MemPool", None)
        if pool_cls is not None and self._pool is None:
            self._pool = pool_cls()
        if self._pool is not None:
            with torch.cuda.use_mem_pool(self._pool):
                return torch.empty(size, dtype=torch.uint8, device="cuda")
        return torch.empty(size, dtype=torch.uint8, device="cuda")

    def _new_slot(self, where: str, nbytes: int) -> _Slot:
        sid = len(self._slots)
        if where == "cuda" and self.cuda_ipc and "torch" not in sys.modules:
            self.cuda_ipc = False
            self.notes.append(
                "torch is not installed here, and CUDA IPC goes through torch; CUDA arrays "
                "crossed through host memory"
            )
        if where == "cuda" and self.cuda_ipc:
            try:
                # torch is imported by the judge before any arena exists; never at import.
                from torch.multiprocessing.reductions import reduce_tensor

                buf = self._alloc_cuda(nbytes)
                shared = reduce_tensor(buf)  # type: ignore[no-untyped-call]
            except Exception as exc:  # no IPC here (driver, MIG, container): go by host
                self.cuda_ipc = False
                self.notes.append(
                    f"CUDA IPC failed ({type(exc).__name__}: {exc}); CUDA "
                    "arrays crossed through host memory"
                )
                return self._new_slot("host", nbytes)
            handle = base64.b64encode(pickle.dumps(shared)).decode()
            slot = _Slot(SlotSpec(slot=sid, where="cuda", nbytes=buf.numel(), handle=handle), buf)
        else:
            size = max(nbytes, 1)
            path = self.directory / f"slot{sid}"
            with path.open("wb") as f:
                f.truncate(size)
            with path.open("r+b") as f:
                mm = mmap.mmap(f.fileno(), size)
            buf = np.frombuffer(mm, dtype=np.uint8, count=size)
            slot = _Slot(SlotSpec(slot=sid, where="host", nbytes=size, handle=str(path)), buf, mm)
        self._slots[sid] = slot
        return slot

    def _slot_for(
        self, key: tuple[str, ...], where: str, nbytes: int, new: list[SlotSpec]
    ) -> _Slot:
        if where == "cuda" and not self.cuda_ipc:
            where = "host"
        sid = self._by_key.get(key)
        if sid is not None:
            slot = self._slots[sid]
            if slot.spec.where == where and slot.spec.nbytes >= nbytes:
                return slot
        slot = self._new_slot(where, nbytes)
        self._by_key[key] = slot.spec.slot
        new.append(slot.spec)
        return slot

    # -- inputs ---------------------------------------------------------------------------
    def encode_inputs(
        self, obj: Any, key: str, new: list[SlotSpec], mask: bytes | None = None
    ) -> Node:
        """Describe ``obj`` and copy its arrays into slots keyed by ``key`` and path; with
        ``mask``, each slot holds its bytes XORed with it until the contestant's call
        starts (`SlotTable.unmask`)."""
        node = self._encode(obj, (key, "in"), new)
        if mask is not None:
            for slot_id, nbytes in _array_slots(node):
                xor_bytes(self._slots[slot_id].buf, nbytes, mask)
        return node

    def _encode(self, x: Any, path: tuple[str, ...], new: list[SlotSpec]) -> Node:
        fw = array_kind(x)
        if fw is not None:
            nbytes = array_nbytes(x, fw)
            where = "cuda" if device_of(x, fw) == "cuda" else "host"
            slot = self._slot_for(path, where, nbytes, new)
            copy_in(slot.buf, x, fw)
            return _array_node(
                x,
                fw,
                slot.spec.slot,
                nbytes,
                stride=dense_stride(x, fw),
                requires_grad=bool(getattr(x, "requires_grad", False)),
            )
        if isinstance(x, _PLAIN):
            return _value_node(x)
        if isinstance(x, dict) and all(isinstance(k, str) for k in x):
            return DictNode(
                type_name=type_name(x),
                keys=list(x),
                items=[self._encode(v, (*path, k), new) for k, v in x.items()],
            )
        if isinstance(x, tuple | list) and not hasattr(x, "_fields"):
            return SeqNode(
                kind="tuple" if isinstance(x, tuple) else "list",
                type_name=type_name(x),
                items=[self._encode(v, (*path, str(i)), new) for i, v in enumerate(x)],
            )
        return PickleNode(data=base64.b64encode(pickle.dumps(x)).decode())

    # -- outputs --------------------------------------------------------------------------
    def output_slots(self, expected: Any, key: str, new: list[SlotSpec]) -> list[int]:
        """One slot per array of the expected output, in flattening order."""
        out = []
        for i, (_, leaf, fw) in enumerate(array_leaves(expected)):
            nbytes = int(leaf.nbytes)
            where = "cuda" if device_of(leaf, fw) == "cuda" else "host"
            out.append(self._slot_for((key, "out", str(i)), where, nbytes, new).spec.slot)
        return out

    def decode_output(self, node: Node, allowed: set[int]) -> Any:
        """The contestant's output, rebuilt as new arrays the judge alone holds."""
        if isinstance(node, ArrayNode):
            if node.slot is None or node.slot not in allowed:
                raise ValueError(f"an output array of shape {node.shape} had no slot")
            slot = self._slots[node.slot]
            if node.nbytes > slot.spec.nbytes:
                raise ValueError("an output array claims more bytes than its slot holds")
            return rebuild_array(node, slot.buf[: node.nbytes], fresh=True)
        if isinstance(node, ValueNode):
            return _value_of(node)
        if isinstance(node, SeqNode):
            items = [self.decode_output(i, allowed) for i in node.items]
            return tuple(items) if node.kind == "tuple" else items
        if isinstance(node, DictNode):
            return {
                k: self.decode_output(v, allowed)
                for k, v in zip(node.keys, node.items, strict=True)
            }
        if isinstance(node, OpaqueNode):
            return _Opaque(node.type_name)
        raise ValueError("a pickled object is not a valid output description")

    def read_inputs(self, node: Node, original: Any) -> Any:
        """The arguments as the input slots hold them now, shaped like ``original`` (what the
        judge encoded as ``node``): after a call, the contestant's writes into its inputs are
        here, whatever it reports. Values that crossed outside the slots are ``original``'s."""
        if isinstance(node, ArrayNode) and node.slot is not None and node.slot in self._slots:
            slot = self._slots[node.slot]
            return rebuild_array(node, slot.buf[: node.nbytes], fresh=False)
        if isinstance(node, SeqNode) and isinstance(original, tuple | list):
            return self._read_seq(node, original)
        if isinstance(node, DictNode) and isinstance(original, dict):
            return self._read_dict(node, original)
        return original

    def _read_seq(self, node: SeqNode, original: tuple[Any, ...] | list[Any]) -> Any:
        if len(node.items) != len(original):
            return original
        items = [self.read_inputs(n, o) for n, o in zip(node.items, original, strict=True)]
        return tuple(items) if isinstance(original, tuple) else items

    def _read_dict(self, node: DictNode, original: dict[Any, Any]) -> Any:
        if list(node.keys) != list(original):
            return original
        return {
            k: self.read_inputs(n, original[k]) for k, n in zip(node.keys, node.items, strict=True)
        }

    def close(self) -> None:
        for slot in self._slots.values():
            slot.buf = None
            if slot.mm is not None:
                # A view still held elsewhere keeps the map; it goes with its last view.
                with contextlib.suppress(BufferError):
                    slot.mm.close()
        self._slots.clear()


@dataclass(frozen=True)
class _Opaque:
    """Stands for an output object that could not cross; never equal to a real output."""

    type_name: str


def _array_slots(node: Node) -> Iterator[tuple[int, int]]:
    """(slot, bytes) of every array a node describes."""
    if isinstance(node, ArrayNode):
        if node.slot is not None and node.nbytes:
            yield node.slot, node.nbytes
    elif isinstance(node, SeqNode | DictNode):
        for item in node.items:
            yield from _array_slots(item)


class SlotTable:
    """The contestant's view of the judge's slots."""

    def __init__(self) -> None:
        self._bufs: dict[int, Any] = {}
        self._maps: list[mmap.mmap] = []
        self.copied: set[int] = set()
        """ids of the last call's arrays that are copies, not views of their slot: the
        judge cannot see writes into them (`Arena.read_inputs`)."""
        self._masked: list[tuple[Any, int, bytes, Any]] = []
        """Slots the last call's views still see masked: (buffer, bytes, mask, tail)."""

    def attach(self, specs: list[SlotSpec]) -> None:
        for spec in specs:
            if spec.where == "cuda":
                fn, args = pickle.loads(base64.b64decode(spec.handle))
                self._bufs[spec.slot] = fn(*args)
            else:
                with open(spec.handle, "r+b") as f:
                    mm = mmap.mmap(f.fileno(), spec.nbytes)
                self._maps.append(mm)
                self._bufs[spec.slot] = np.frombuffer(mm, dtype=np.uint8, count=spec.nbytes)

    def materialize(self, node: Node, mask: bytes | None = None) -> Any:
        """The call's arguments: arrays are views of the judge's slots where their layout
        allows (a dense array on the slot's own device), so whatever the call writes into an
        input is there for the judge to see (`Arena.read_inputs`); others are copies.

        With the judge's ``mask`` the slots hold masked bytes: a copy is unmasked before it
        is made, a view stays masked until `unmask` (as the call starts)."""
        if isinstance(node, ArrayNode):
            assert node.slot is not None
            buf = self._bufs[node.slot][: node.nbytes]
            out = rebuild_array(node, buf, fresh=False)
            if node.nbytes and data_ptr(out) != data_ptr(buf):
                if mask is not None:  # made from masked bytes: again, from the inputs
                    xor_bytes(buf, node.nbytes, mask)
                    out = rebuild_array(node, buf, fresh=False)
                self.copied.add(id(out))
            elif mask is not None and node.nbytes:
                tail = xor_tail(buf, node.nbytes, mask)  # now: unmasking must not wait
                self._masked.append((buf, node.nbytes, mask, tail))
            return out
        if isinstance(node, ValueNode):
            return _value_of(node)
        if isinstance(node, PickleNode):
            return pickle.loads(base64.b64decode(node.data))
        if isinstance(node, SeqNode):
            items = [self.materialize(i, mask) for i in node.items]
            return tuple(items) if node.kind == "tuple" else items
        if isinstance(node, DictNode):
            return {
                k: self.materialize(v, mask) for k, v in zip(node.keys, node.items, strict=True)
            }
        raise ValueError(f"cannot materialize a {node.kind} node")

    def unmask(self) -> None:
        """Unmask the views of the last `materialize`: on a device, queued on the current
        stream, so they read the inputs only once the stream gets there."""
        while self._masked:  # the same list: the watch holds its identity
            buf, nbytes, mask, tail = self._masked.pop()
            xor_bytes(buf, nbytes, mask, tail)

    def write_output(self, out: Any, out_slots: list[int]) -> Node:
        """Describe ``out`` and copy its arrays into the judge's output slots, in order."""
        counter = itertools.count()
        return self._write(out, out_slots, counter, depth=0)

    def _write(self, x: Any, out_slots: list[int], counter: Iterator[int], depth: int) -> Node:
        if depth > 32:
            return OpaqueNode(type_name="<nested deeper than 32 levels>")
        fw = array_kind(x)
        if fw is not None:
            i = next(counter)
            nbytes = array_nbytes(x, fw)
            slot = out_slots[i] if i < len(out_slots) else None
            if slot is not None and nbytes <= int(self._bufs[slot].shape[0]):
                copy_in(self._bufs[slot], x, fw)
            else:
                slot = None
            return _array_node(x, fw, slot, nbytes)
        if isinstance(x, _PLAIN):
            if isinstance(x, str) and len(x) > 10_000:
                return OpaqueNode(type_name="str (longer than 10000 characters)")
            return _value_node(x)
        if isinstance(x, dict) and all(isinstance(k, str) for k in x) and len(x) <= 1000:
            return DictNode(
                type_name=type_name(x),
                keys=list(x),
                items=[self._write(v, out_slots, counter, depth + 1) for v in x.values()],
            )
        if isinstance(x, tuple | list) and len(x) <= 1000:
            return SeqNode(
                kind="tuple" if isinstance(x, tuple) else "list",
                type_name=type_name(x),
                items=[self._write(v, out_slots, counter, depth + 1) for v in x],
            )
        return OpaqueNode(type_name=type_name(x))
