"""Inside the contestant: notice when candidate code rebinds what the harness relies on.

The harness binds its timers (CUDA events, host clocks), synchronisation and the framework
functions the reference calls before any candidate is imported. `Watch.snapshot` records
the identity of every attribute of those modules and classes; `Watch.changes` names each
one rebound since. A candidate that patches ``torch.cuda.Event.elapsed_time`` or
``torch.softmax`` at import or during a call is thus named, and the judge makes every
in-process number (and, for a framework function, every row) suspicious.

Functions are not the whole timing path: a timer keeps state in its instance (the bound
clock, CUPTI's module, the harness's device and timer) and in data (the L2 flush buffer).
Once the reference's calls are done and before any candidate is imported,
`Watch.watch_state` records that state too: the harness object and every object of ours it
holds (their attributes, their class, attributes set on them later, which would shadow a
method), the plain data of our timing modules, and each buffer there by address, size,
dtype and device. A candidate that swaps the flush buffer for a tiny one, resizes it in
place, or sets an attribute on the timer object is named like a rebound function
('nsight_core.collectors.events._FLUSH_BUFFERS['torch-cuda'] (resized)').

This runs in the contestant, so a determined candidate could patch this module too; it is
one cross-check among several, and the judge never takes a number on its word alone.
Attributes that appear later (lazy submodules) are not changes.

It also finds files in a candidate's directory that shadow a module the harness or a
framework imported (a ``torch.py`` next to the candidate): the harness imports them first, so
the shadow is never used, but the attempt is reported.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Hashable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

WATCHED_MODULES = (
    "time",
    "builtins",
    "gc",
    "torch",
    "torch.cuda",
    "torch.nn.functional",
    "torch.Tensor",
    "torch.cuda.Event",
    "torch.cuda.Stream",
    "numpy",
    "cupy",
    "cupy.cuda",
    "triton",
    "nvtx",
    "nsight_core.collectors.events",
    "nsight_core.collectors.events.Device",
    "nsight_core.collectors.events.StreamHold",
    "nsight_core.collectors.window_guard",
    "nsight_core.collectors.window_guard.WindowGuard",
    "nsight_core.collectors.l2_persist",
    "nsight_core.collectors.l2_persist.PersistingL2",
    "nsight_core.collectors.cupti",
    "nsight_core.collectors.cupti.CuptiTimer",
    "nsight_core.collectors.cupti.CuptiCallTimer",
    "nsight_core.collectors.cupti_records",
    "nsight_core.collectors.timers",
    "nsight_core.collectors.timers.RangeTimer",
    "nsight_core.collectors.timers.ClockTimer",
    "nsight_core.collectors.timers.CallTimer",
    "nsight_core.collectors.timers.TimedCall",
    "nsight_core.annotation",
    "nsight_core.contestant.core",
    "nsight_core.contestant.core.Contestant",
    "nsight_core.contestant.call_guard",
    "nsight_core.contestant.call_guard.CallGuard",
    "nsight_core.contestant.call_guard.Guarded",
    "nsight_core.contestant.signal_guard",
    "nsight_core.contestant.signal_guard.SignalGuard",
    "nsight_core.contestant.integrity",
    "nsight_core.contestant.integrity.Watch",
    "nsight_core.protocol",
    "nsight_core.runtime.messages",
    "nsight_core.runtime.messages.ReplyMsg",
    "nsight_core.runtime.exchange",
    "nsight_core.runtime.exchange.SlotTable",
    "nsight_core.runtime.slot_bytes",
    "cupti.cupti",
    "socket.socket",
)
"""Modules and classes whose attributes are watched (those not imported are skipped)."""

DATA_MODULES = (
    "nsight_core.collectors.events",
    "nsight_core.collectors.window_guard",
    "nsight_core.collectors.l2_persist",
    "nsight_core.collectors.timers",
    "nsight_core.collectors.cupti",
    "nsight_core.collectors.cupti_records",
    "nsight_core.contestant.core",
    "nsight_core.contestant.call_guard",
    "nsight_core.contestant.signal_guard",
    "nsight_core.contestant.integrity",
)
"""Our timing modules, whose plain data is watched too (`Watch.watch_state`): nothing in them
changes a module-level value after start-up, and the L2 flush buffers live there."""

STATE_DEPTH = 3
"""How far `Watch.watch_state` follows our own objects from the harness object."""

_SKIP = frozenset({"__dict__", "__weakref__", "__doc__", "_initialized", "__annotations__"})


def _resolve(name: str) -> object | None:
    mod = sys.modules.get(name)
    if mod is not None:
        return mod
    parent, _, attr = name.rpartition(".")
    owner = sys.modules.get(parent)
    return getattr(owner, attr, None) if owner is not None and parent else None


def _attributes(obj: object, *, modules: bool = False) -> dict[str, int]:
    try:
        items = list(vars(obj).items())
    except TypeError:
        return {}
    out = {}
    for name, value in items:
        if name in _SKIP:
            continue
        # Only behaviour is watched: functions, classes, descriptors (and, for user modules,
        # the modules they call through, such as their `torch`). Plain data (counters,
        # caches, flags) legitimately changes while frameworks run.
        behaviour = callable(value) or isinstance(value, classmethod | staticmethod | property)
        if behaviour or (modules and isinstance(value, ModuleType)):
            out[name] = id(value)
    return out


def _is_array(value: object) -> bool:
    return hasattr(value, "nbytes") and hasattr(value, "shape") and hasattr(value, "dtype")


def _address(value: Any) -> int:
    with contextlib.suppress(Exception):
        if hasattr(value, "data_ptr"):
            return int(value.data_ptr())  # torch
        data: Any = getattr(value, "data", None)
        if hasattr(data, "ptr"):
            return int(data.ptr)  # cupy
        return int(value.ctypes.data)  # numpy
    return 0


def _own_attributes(value: object) -> frozenset[str]:
    try:
        return frozenset(vars(value))
    except TypeError:
        return frozenset()


def fingerprint(value: object, *, items: bool = False) -> Hashable:
    """What must stay the same of one watched value: an array's identity, address, size,
    dtype, device and the attributes set on it (one set on the flush buffer could shadow
    the method that reads it); a plain value itself; anything else, its identity; with
    ``items``, a dict's items too, one level down (the flush buffers by device kind)."""
    if isinstance(value, bool | int | float | str | bytes | type(None)):
        return (type(value).__name__, value)
    if _is_array(value):
        arr: Any = value
        with contextlib.suppress(Exception):
            return (
                "array",
                id(arr),
                _address(arr),
                int(arr.nbytes),
                tuple(arr.shape),
                str(arr.dtype),
                str(getattr(arr, "device", "cpu")),
                _own_attributes(arr),
            )
        return ("array", id(arr))
    if isinstance(value, dict):
        inner = tuple((repr(k), fingerprint(v)) for k, v in list(value.items())) if items else ()
        return ("dict", id(value), inner)
    return ("object", id(value))


def _what_changed(before: Hashable, now: Hashable) -> str:
    """A few words on how a fingerprint changed, for the finding's name."""
    if not (isinstance(before, tuple) and isinstance(now, tuple)) or before[:1] != now[:1]:
        return "replaced"
    kind = before[0]
    if kind == "array" and len(before) == len(now) == 8:
        if before[1] != now[1]:
            return "replaced"
        if before[3] != now[3] or before[4] != now[4]:
            return f"resized: {before[4]} -> {now[4]}"
        if before[7] != now[7]:
            return f"attribute set on it: {', '.join(sorted(set(now[7]) - set(before[7])))}"
        return "moved"
    if kind == "dict" and before[1] == now[1]:
        old, new = dict(before[2]), dict(now[2])
        keys = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
        parts = [
            f"[{k}] "
            + (
                "added"
                if k not in old
                else "removed"
                if k not in new
                else _what_changed(old[k], new[k])
            )
            for k in keys
        ]
        return "; ".join(parts) or "changed"
    return "replaced" if kind in ("object", "dict") else f"{before[1]!r} -> {now[1]!r}"


def _qualified(obj: object) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}()"


def _ours(value: object) -> bool:
    return type(value).__module__.startswith("nsight_core.") and not isinstance(value, type)


class _State:
    """One object's instance state, as `watch_state` found it."""

    def __init__(self, obj: object, volatile: frozenset[str]) -> None:
        self.obj = obj
        self.cls = type(obj)
        self.volatile = volatile
        self.attrs = {
            k: fingerprint(v)
            for k, v in _instance_items(obj)
            if k not in volatile and v is not None
        }
        self.names = frozenset(k for k, _ in _instance_items(obj))

    def changes(self, name: str) -> list[str]:
        if type(self.obj) is not self.cls:
            return [f"{name} (its class was changed to {type(self.obj).__qualname__})"]
        now = dict(_instance_items(self.obj))
        found = []
        for attr, before in self.attrs.items():
            if attr not in now:
                found.append(f"{name}.{attr} (removed)")
                continue
            after = fingerprint(now[attr])
            if after != before:
                found.append(f"{name}.{attr} ({_what_changed(before, after)})")
        for attr in sorted(set(now) - self.names - self.volatile):
            found.append(f"{name}.{attr} (set on the instance)")
        return found


def _instance_items(obj: object) -> list[tuple[str, object]]:
    """An object's own attributes: its ``__dict__`` and its ``__slots__``."""
    items: list[tuple[str, object]] = []
    with contextlib.suppress(TypeError):
        items += [(k, v) for k, v in list(vars(obj).items()) if not k.startswith("__")]
    for cls in type(obj).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            if not slot.startswith("__") and hasattr(obj, slot):
                items.append((slot, getattr(obj, slot)))
    return items


class Watch:
    """Identities of watched attributes, taken before any candidate code runs."""

    def __init__(self, names: Iterable[str] = WATCHED_MODULES) -> None:
        self._names = tuple(names)
        self._seen: dict[str, dict[str, int]] = {}
        self._keep: list[object] = []
        self._data: dict[str, dict[str, Hashable]] = {}
        self._state: dict[str, _State] = {}
        self.snapshot()

    def snapshot(self) -> None:
        for name in self._names:
            obj = _resolve(name)
            if obj is None or name in self._seen:
                continue
            self._seen[name] = _attributes(obj)
            self._keep.append(obj)  # ids stay unique while the objects are alive

    def add_module(self, name: str) -> None:
        """Also watch a user module (the reference's): its functions and the modules it
        calls through, so a candidate that rebinds the reference's `torch` to a slow proxy,
        or one of its helpers, is named."""
        obj = sys.modules.get(name)
        if obj is not None and name not in self._seen:
            self._seen[name] = _attributes(obj, modules=True)
            self._keep.append(obj)

    def watch_state(self, harness: object, volatile: Iterable[str] = ()) -> None:
        """Also watch the timing path's state from now on: ``harness`` (the object that
        calls candidates and times them; ``volatile`` names its attributes that change by
        design), every object of ours it holds, a few levels deep (each class names its own
        volatile attributes in ``watch_volatile``), and the plain data of `DATA_MODULES`.
        Call it once the reference's calls are done and before any candidate is imported:
        the flush buffer and the device exist by then."""
        self._data = {}
        for name in DATA_MODULES:
            mod = sys.modules.get(name)
            if mod is not None:
                self._data[name] = {
                    k: fingerprint(v, items=True)
                    for k, v in list(vars(mod).items())
                    if not k.startswith("__")
                    and not callable(v)
                    and not isinstance(v, ModuleType | classmethod | staticmethod | property)
                }
                self._keep.append(mod)
        # Each object is named by its own class ('...events.Device().kind'), not by the
        # path to it, so a backend can tell whether its timer goes through it.
        self._state = {}
        todo: list[tuple[object, frozenset[str], int]] = [(harness, frozenset(volatile), 0)]
        seen: set[int] = set()
        while todo:
            obj, skip, depth = todo.pop(0)
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            name = _qualified(obj)
            while name in self._state:
                name += "'"
            self._state[name] = _State(obj, skip)
            self._keep.append(obj)
            if depth + 1 >= STATE_DEPTH:
                continue
            for attr, value in _instance_items(obj):
                if attr not in skip and _ours(value):
                    inner = frozenset(getattr(type(value), "watch_volatile", ()))
                    todo.append((value, inner, depth + 1))

    def changes(self) -> list[str]:
        """'torch.cuda.Event.elapsed_time' for each watched attribute rebound since; for
        state, 'nsight_core.collectors.events.Device().kind (...)' with how it changed."""
        found = self._state_changes()
        for name, attrs in self._seen.items():
            obj = _resolve(name)
            if obj is None:
                found.append(f"{name} (removed)")
                continue
            try:
                now = vars(obj)
            except TypeError:
                continue
            for attr, ident in attrs.items():
                value = now.get(attr)
                if value is None or id(value) != ident:
                    found.append(f"{name}.{attr}")
        return found

    def _state_changes(self) -> list[str]:
        found = []
        for name, data in self._data.items():
            mod = sys.modules.get(name)
            if mod is None:
                continue
            now = vars(mod)
            for attr, before in data.items():
                after = fingerprint(now[attr], items=True) if attr in now else None
                if after != before:
                    how = "removed" if after is None else _what_changed(before, after)
                    found.append(f"{name}.{attr} ({how})")
        for name, state in self._state.items():
            found += state.changes(name)
        return found


def harness_module_names() -> frozenset[str]:
    """Top-level names of what this process imported before any user code: the harness and
    the frameworks. Never ``__main__``: every script and package has one of its own."""
    names = {name.partition(".")[0] for name in list(sys.modules)}
    return frozenset(names - {"__main__", "__mp_main__"})


def shadowing_files(directories: Iterable[Path], harness: frozenset[str]) -> list[str]:
    """Files or packages in ``directories`` named like a module the harness or a framework
    imported (``harness``), found installed elsewhere.

    Only those matter: a look-alike of a module nothing here imports is a plain user module,
    and flagging it (a package's own ``__main__.py``) made honest jobs suspicious.
    """
    found = []
    for d in directories:
        try:
            entries = sorted(d.iterdir())
        except OSError:  # not a folder, or one confinement keeps closed: nothing imports from it
            continue
        for entry in entries:
            stem = entry.stem if entry.suffix == ".py" else entry.name
            if entry.suffix != ".py" and not (entry / "__init__.py").exists():
                continue
            if stem not in harness:
                continue
            if stem in sys.builtin_module_names or stem in sys.stdlib_module_names:
                found.append(f"{entry} shadows the standard module {stem!r}")
                continue
            origin = getattr(sys.modules.get(stem), "__file__", None)
            where = Path(origin).resolve() if origin else None
            if where is not None and d.resolve() not in where.parents:
                found.append(f"{entry} shadows the installed module {stem!r}")
    return found
