"""Inside the contestant: notice when candidate code rebinds what the harness relies on.

The harness binds its timers (CUDA events, host clocks), synchronisation and the framework
functions the reference calls before any candidate is imported. `Watch.snapshot` records
the identity of every attribute of those modules and classes; `Watch.changes` names each
one rebound since. A candidate that patches ``torch.cuda.Event.elapsed_time`` or
``torch.softmax`` at import or during a call is thus named, and the judge makes every
in-process number (and, for a framework function, every row) suspicious.

This runs in the contestant, so a determined candidate could patch this module too; it is
one cross-check among several, and the judge never takes a number on its word alone.
Attributes that appear later (lazy submodules) are not changes.

It also finds files in a candidate's directory that shadow a module the harness or a
framework imported (a ``torch.py`` next to the candidate): the harness imports them first, so
the shadow is never used, but the attempt is reported.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

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
    "nsight_core.collectors.cupti",
    "nsight_core.collectors.cupti.CuptiTimer",
    "nsight_core.collectors.cupti.CuptiCallTimer",
    "nsight_core.collectors.timers",
    "nsight_core.collectors.timers.RangeTimer",
    "nsight_core.collectors.timers.ClockTimer",
    "nsight_core.contestant.core",
    "nsight_core.runtime.exchange",
    "nsight_core.runtime.exchange.SlotTable",
    "socket.socket",
)
"""Modules and classes whose attributes are watched (those not imported are skipped)."""

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


class Watch:
    """Identities of watched attributes, taken before any candidate code runs."""

    def __init__(self, names: Iterable[str] = WATCHED_MODULES) -> None:
        self._names = tuple(names)
        self._seen: dict[str, dict[str, int]] = {}
        self._keep: list[object] = []
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

    def changes(self) -> list[str]:
        """'torch.cuda.Event.elapsed_time' for each watched attribute rebound since."""
        found = []
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
