"""The call's guard: no code of a candidate's runs between its call's return and the moment
the harness holds its output.

An in-process timer's window closes when the call returns; the harness then reads the
output (the timer's snapshot of it, the aliasing check, the copy into the judge's slot).
Code of the candidate's that runs there would finish the output after the window, and the
check would pass a call whose work was not timed. Python offers many ways to be called
later without a thread: a finalizer the collector runs at the harness's first allocation, a
profile or trace function, a torch function or dispatch mode left on torch's stacks, an
attribute on the output tensor named like a method the harness calls (``out.detach``), a
tuple subclass whose iteration fills the output. So each call runs under a `Guarded`:

- **before the call** (`CallGuard.open`): the collector is turned off, and profile and
  trace functions and torch modes left since the last call (an import's, a thread's) are
  removed and named;
- **at the call's tail, inside the window** (`Guarded.wrap`): the collector off again and
  the harness's own profile and trace functions put back, naming any the call left set.
  This part cannot wait: the timer's own end read is a call that a profile function sees
  return, and the collector may run at the first allocation after it;
- **right after the timer's end read**, before any harness code touches the output
  (`Guarded.settle`, which the timers call where they snapshot the output, and the
  contestant calls again for those that do not): torch modes the call left on the stacks
  are popped and named; the output's containers are rebuilt as plain tuples, lists and
  dicts through the base types' own slots (``tuple.__iter__(x)``, ``dict.items(d)``), so
  no method of a subclass runs; an array with attributes of its own is handed over as a
  fresh alias over the same memory without them, and attributes named like a method of
  its class are named ("shadow its methods"). The inputs the harness checks afterwards
  (aliasing, copied inputs' mutation) get the same treatment (`Guarded.settle_inputs`);
- **once the output is in the judge's slot** (`Guarded.release`): the collector as it was
  found, and what the guard kept alive (the candidate's own output objects, popped modes,
  removed hooks) let go, so their finalizers run only now, when nobody reads that output.

A named finding fails the call (the contestant's reasons); a container rebuilt or a
finalizer held back names nothing: the judge then reads the output as the window left it.

Everything the guard calls is bound when it is made, before any candidate is imported, and
the contestant's integrity watch covers this module. Signal handlers and interval timers
the call left are taken back in `settle` (signal_guard.py). Not covered here
(docs/correctness.md, "What is not closed"): audit hooks (they cannot be removed), kernels a
candidate registers for torch's own operators (``torch.library``), and threads, which the
timers' own checks see.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import FunctionType
from typing import Any, ClassVar

from nsight_core.contestant.signal_guard import SignalGuard

MAX_DEPTH = 32
"""As deep as the exchange describes an output (`SlotTable.write_output`): a part nested
deeper crosses as an opaque object that fails the check, so the guard does not read it."""

_PLAIN_KEYS = (str, int, float, bool, type(None), bytes)
"""Exact key types whose hashing and comparison run no Python code (compared by identity:
a candidate's metaclass may define ``__eq__`` and ``__hash__``)."""

_type_qualname: Callable[[type], str] = type.__dict__["__qualname__"].__get__

Path = tuple[str | int, ...]
"""Where a value sits: its root's name, then one index or key per level."""

_NONE_YET = object()
"""No output settled yet (a sentinel of its own: the guard holds no cycle the collector
would have to break)."""


@dataclass(frozen=True)
class NotRead:
    """Stands for a part of an output the harness cannot read without running the
    candidate's code: a dict keyed by objects of the candidate's own types, or a part nested
    deeper than `MAX_DEPTH`. The exchange cannot describe either (it needs str keys and a
    bounded depth), so such an output fails the check with or without the stand-in."""

    type_name: str


@dataclass(frozen=True)
class _ArrayKind:
    """One framework's exact array class whose instances take attributes of their own."""

    alias: Callable[[Any], Any]
    """A fresh array over the same memory, without the original's attributes."""
    names: frozenset[str]
    """What the class answers to: an instance attribute of one of these names shadows it."""
    storage: Callable[[Any], Any] | None = None
    """The array's storage object (torch), which also takes attributes and is shared by
    every alias; None where the framework has none the harness calls methods on."""
    storage_type: type | None = None
    storage_names: frozenset[str] = frozenset()


@dataclass(frozen=True)
class _TorchState:
    """torch's global stacks the harness's operations go through, bound before any
    candidate code runs (a candidate rebinding ``torch._C`` later changes nothing here)."""

    function_len: Callable[[], int]
    function_pop: Callable[[], Any]
    dispatch_len: Callable[[], int]
    dispatch_pop: Callable[[Any], Any]
    key_included: Callable[[Any], bool]
    python_dispatcher_key: Any
    function_base: int
    dispatch_base: int

    @classmethod
    def bind(cls, torch: Any) -> _TorchState:
        c = torch._C
        return cls(
            function_len=c._len_torch_function_stack,
            function_pop=c._pop_torch_function_stack,
            dispatch_len=c._len_torch_dispatch_stack,
            dispatch_pop=c._pop_torch_dispatch_stack,
            key_included=c._dispatch_tls_is_dispatch_key_included,
            python_dispatcher_key=c.DispatchKey.PythonDispatcher,
            function_base=int(c._len_torch_function_stack()),
            dispatch_base=int(c._len_torch_dispatch_stack()),
        )


@dataclass(frozen=True)
class _Monitoring:
    """``sys.monitoring`` (Python 3.12+): a tool id the harness left free is one a candidate
    can take, to have its callbacks called on the harness's own code after the window."""

    free_ids: tuple[int, ...]
    events: tuple[int, ...]
    get_tool: Callable[[int], str | None]
    register_callback: Callable[[int, int, Any], Any]
    set_events: Callable[[int, int], None]
    free_tool_id: Callable[[int], None]

    @classmethod
    def bind(cls) -> _Monitoring | None:
        mon: Any = getattr(sys, "monitoring", None)
        if mon is None:
            return None
        return cls(
            free_ids=tuple(i for i in range(6) if mon.get_tool(i) is None),
            events=tuple(
                v for v in vars(mon.events).values() if type(v) is int and v > 0 and not v & (v - 1)
            ),
            get_tool=mon.get_tool,
            register_callback=mon.register_callback,
            set_events=mon.set_events,
            free_tool_id=mon.free_tool_id,
        )

    def clear(self, tool: int) -> list[object]:
        """Unregister every callback of ``tool`` and free it (its events, local ones too,
        then call nothing); the callbacks it had, to keep alive until `Guarded.release`."""
        had = [self.register_callback(tool, event, None) for event in self.events]
        self.set_events(tool, 0)
        self.free_tool_id(tool)
        return [c for c in had if c is not None]


class CallGuard:
    """What every call's `Guarded` restores and relies on, bound before any candidate code
    runs: the collector's switches, the harness's own profile and trace functions, torch's
    stacks and the array classes whose instances take attributes."""

    def __init__(self) -> None:
        self.arrays: tuple[tuple[type, _ArrayKind], ...] = ()
        """Exact array classes, found by identity (a dict would hash a candidate's class)."""
        self.gc_disable = gc.disable
        self.gc_enable = gc.enable
        self.gc_isenabled = gc.isenabled
        self.getprofile = sys.getprofile
        self.setprofile = sys.setprofile
        self.gettrace = sys.gettrace
        self.settrace = sys.settrace
        self.profile = sys.getprofile()
        """The harness's own profile function (None, unless a profiler runs the process)."""
        self.trace = sys.gettrace()
        self.monitoring = _Monitoring.bind()
        self.signals = SignalGuard()
        self.torch: _TorchState | None = None
        self.open_call: Guarded | None = None
        """The call under way: a harness that failed before releasing it is released at
        the next `open`, so the collector is never left off."""
        self.bind()

    watch_volatile: ClassVar[frozenset[str]] = frozenset({"open_call"})
    """Attributes each call moves; the integrity watch checks all the others."""

    def bind(self) -> None:
        """Bind the frameworks imported since (the reference's cupy): call it before any
        candidate is imported. Binding twice changes nothing already bound."""
        self.signals.bind()
        torch = sys.modules.get("torch")
        if torch is not None and self.torch is None:
            self.torch = _TorchState.bind(torch)
            kind = _ArrayKind(
                alias=torch._C.TensorBase.detach,
                names=frozenset(dir(torch.Tensor)),
                storage=torch._C.TensorBase.untyped_storage,
                storage_type=torch.UntypedStorage,
                storage_names=frozenset(dir(torch.UntypedStorage)),
            )
            self.arrays += ((torch.Tensor, kind),)
        cupy = sys.modules.get("cupy")
        ndarray: Any = getattr(cupy, "ndarray", None)
        takes_attributes = bool(getattr(ndarray, "__dictoffset__", 0))
        if takes_attributes and not any(t is ndarray for t, _ in self.arrays):
            self.arrays += ((ndarray, _ArrayKind(ndarray.view, frozenset(dir(ndarray)))),)
        # numpy's exact ndarray has no instance dictionary: nothing to shadow a method with.

    def open(self) -> Guarded:
        """A guard for the next call, opened before it (and before the timer's set-up)."""
        if self.open_call is not None:
            self.open_call.release()
        self.open_call = Guarded(self)
        return self.open_call


class Guarded:
    """One call under the guard: `wrap` its callable, `settle` its output and inputs after
    the window, `release` once the output is in the judge's slot; `findings` fail it."""

    def __init__(self, guard: CallGuard) -> None:
        self._g = guard
        self.findings: list[str] = []
        self._keep: list[object] = []
        """The candidate's objects the harness let go of: their finalizers wait for
        `release`."""
        self._settled: object = _NONE_YET
        """The output `settle` handed out last."""
        self._real_armed = False
        """The call left the wall-clock timer armed (`_seal` found it; `settle` names it)."""
        self._gc_was = guard.gc_isenabled()
        guard.gc_disable()
        self._hooks("between calls")
        self._modes("between calls")

    def wrap(self, fn: Callable[[], Any]) -> Callable[[], Any]:
        """``fn`` with the guard's in-window part at its tail (it runs whether ``fn``
        returns or raises)."""

        def guarded() -> Any:
            try:
                return fn()
            finally:
                self._seal()

        return guarded

    def _seal(self) -> None:
        """Inside the window: nothing of the call's may run once the timer reads its end."""
        self._g.gc_disable()  # the call may have turned it back on
        self._real_armed = self._g.signals.disarm_real() or self._real_armed
        self._hooks("the call")

    def _hooks(self, when: str) -> None:
        g = self._g
        profile = g.getprofile()
        if profile is not g.profile:
            g.setprofile(g.profile)
            self._keep.append(profile)
            self._left(when, f"a profile function set (sys.setprofile: {_name_of(profile)})")
        trace = g.gettrace()
        if trace is not g.trace:
            g.settrace(g.trace)
            self._keep.append(trace)
            self._left(when, f"a trace function set (sys.settrace: {_name_of(trace)})")
        mon = g.monitoring
        if mon is None:
            return
        for tool in mon.free_ids:
            name = mon.get_tool(tool)
            if name is not None:
                self._keep += mon.clear(tool)
                named = str.__repr__(name) if isinstance(name, str) else "?"  # str's own repr
                self._left(when, f"a sys.monitoring tool registered (id {tool}: {named})")

    def _modes(self, when: str) -> None:
        """Pop the torch modes left above the harness's own; their ``__exit__`` never runs
        (it is the candidate's code)."""
        t = self._g.torch
        if t is None:
            return
        while t.function_len() > t.function_base:
            mode = t.function_pop()
            self._keep.append(mode)
            self._left(when, f"a torch function mode active ({_qualname(type(mode))})")
        while t.dispatch_len() > t.dispatch_base:
            mode = t.dispatch_pop(None)
            self._keep.append(mode)
            self._left(when, f"a torch dispatch mode active ({_qualname(type(mode))})")

    def _left(self, when: str, what: str) -> None:
        self.findings.append(
            f"{_who(when)} left {what}, which would have run in the harness after the timed "
            "window; the harness removed it"
        )

    def settle(self, out: Any) -> Any:
        """The output as the window left it, for the harness to read: call it right after
        the timer's end read, before anything else touches the output."""
        if out is self._settled:
            return out
        for what in self._g.signals.take_back(self._keep, self._real_armed):
            self._left("the call", what)
        self._real_armed = False
        self._modes("the call")
        t = self._g.torch
        if t is not None and t.key_included(t.python_dispatcher_key):  # the candidate's switch
            self.findings.append(
                "the call left torch's Python dispatcher enabled, through which code of its "
                "own could run on the harness's operations after the timed window"
            )
        self._keep.append(out)
        plain = self._plain(out, ("output",), 0, strict=False)
        self._settled = plain
        return plain

    def settle_inputs(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The call's arguments for the harness's checks after the call. The harness made
        them plain; the call may have set attributes on them, changed an array's class, or
        put its own objects into a list it was given."""
        self._keep.append((args, kwargs))
        plain = self._plain
        new_args = tuple([plain(v, ("input args", i), 1, strict=True) for i, v in enumerate(args)])
        if not kwargs:
            return new_args, kwargs
        return new_args, {k: plain(v, (f"input {k}",), 1, strict=True) for k, v in kwargs.items()}

    def release(self) -> None:
        """Once the output is in the judge's slot: the collector as the call found it, and
        the candidate's objects let go (their finalizers may run from now on)."""
        if self._g.open_call is self:
            self._g.open_call = None
        keep, self._keep = self._keep, []
        self._settled = _NONE_YET
        if self._gc_was:
            self._g.gc_enable()
        del keep

    def _plain(self, x: Any, path: Path, depth: int, *, strict: bool) -> Any:
        """``x`` with plain containers and arrays without attributes of their own, read
        through the base types' slots only; ``x`` itself where nothing had to change.
        ``strict`` (inputs): an array whose class is a subclass of its framework's was
        changed by the call (the harness makes exact ones)."""
        t = type(x)
        for base, kind in self._g.arrays:
            if t is base:
                return self._array(x, kind, path)
        if issubclass(t, tuple | list):
            if depth >= MAX_DEPTH:
                return NotRead(_qualname(t))
            is_list = issubclass(t, list)
            items = list(list.__iter__(x) if is_list else tuple.__iter__(x))
            changed = t is not (list if is_list else tuple)
            new = []
            for i, v in enumerate(items):
                w = self._plain(v, (*path, i), depth + 1, strict=strict)
                changed = changed or w is not v
                new.append(w)
            if not changed:
                return x
            return new if is_list else tuple(new)
        if issubclass(t, dict):
            return self._dict(x, t, path, depth, strict=strict)
        if strict:
            self._changed_class(t, path)
        return x

    def _dict(self, x: Any, t: type, path: Path, depth: int, *, strict: bool) -> Any:
        if depth >= MAX_DEPTH:
            return NotRead(_qualname(t))
        changed = t is not dict
        new: dict[Any, Any] = {}
        for k, v in list(dict.items(x)):
            tk = type(k)
            if not _one_of(tk, _PLAIN_KEYS):
                if not issubclass(tk, str):
                    return NotRead(_qualname(t))
                k = str.__str__(k)  # a plain copy: the subclass's hash and eq never run
                changed = True
            w = self._plain(v, (*path, k), depth + 1, strict=strict)
            changed = changed or w is not v
            new[k] = w
        return new if changed else x

    def _changed_class(self, t: type, path: Path) -> None:
        for base, _ in self._g.arrays:
            if issubclass(t, base):
                self.findings.append(
                    f"{_render(path)}'s class was changed to {_qualname(t)}, whose "
                    "code would run in the harness's checks after the timed window"
                )
                return

    def _array(self, x: Any, kind: _ArrayKind, path: Path) -> Any:
        """``x``, or a fresh alias without the attributes set on it; shadowing is named."""
        own = _own_names(x)
        if kind.storage is not None:
            self._check_storage(x, kind, path)
        if not own:
            return x
        shadowing = sorted(_key_name(k) for k in own if type(k) is not str or k in kind.names)
        if shadowing:
            self.findings.append(
                f"{_render(path)} has attributes that shadow its methods "
                f"({', '.join(shadowing[:5])}): the harness would have called them after the "
                "timed window; it read the array without them"
            )
        return kind.alias(x)

    def _check_storage(self, x: Any, kind: _ArrayKind, path: Path) -> None:
        """A torch storage is one object for every alias of its memory: its attributes
        cannot be left behind, so they are named (the call fails)."""
        assert kind.storage is not None
        try:
            storage = kind.storage(x)
        except (RuntimeError, NotImplementedError, TypeError):
            return  # no storage (a sparse or wrapper layout): the harness reads none either
        if type(storage) is not kind.storage_type:
            self.findings.append(
                f"the storage of {_render(path)} had its class changed to "
                f"{_qualname(type(storage))}, whose methods would run in the harness after "
                "the timed window"
            )
            return
        own = _own_names(storage)
        if not own:
            return
        shadowing = sorted(
            _key_name(k) for k in own if type(k) is not str or k in kind.storage_names
        )
        if shadowing:
            self.findings.append(
                f"the storage of {_render(path)} has attributes that shadow its methods "
                f"({', '.join(shadowing[:5])}), which the harness would have called after "
                "the timed window"
            )


def _own_names(obj: Any) -> list[object]:
    """The keys of an exact framework object's instance dictionary, read without running
    code of its owner's (a dict subclass set as ``__dict__`` is read through dict's slots)."""
    d = getattr(obj, "__dict__", None)  # the class's own descriptor: its type is exact
    if d is None:
        return []
    if type(d) is dict:
        return list(d) if d else []
    if issubclass(type(d), dict):
        return ["__dict__", *dict.keys(d)]
    return ["__dict__"]


def _qualname(t: type) -> str:
    """A class's name through `type`'s own descriptor, as a plain str: no code of a
    metaclass's or of a str subclass's runs (not even when it is formatted)."""
    return str.__str__(_type_qualname(t))


def _one_of(t: type, types: tuple[type, ...]) -> bool:
    """``t in types`` by identity alone (``in`` would call a metaclass's ``__eq__``)."""
    return any(t is u for u in types)


def _key_name(k: object) -> str:
    """An attribute's name for a finding: a plain str itself, else its class's name."""
    if type(k) is str:
        return k
    return f"<a {_qualname(type(k))} key>"


def _name_of(obj: object) -> str:
    """A hook's name, read without running its code."""
    if type(obj) is FunctionType:
        return str.__str__(obj.__qualname__)
    return f"a {_qualname(type(obj))} object"


def _who(when: str) -> str:
    return "the call" if when == "the call" else "code run between calls"


def _render(path: Path) -> str:
    """'output[1]', "output['mean']", 'input args[0]'."""
    head, *rest = path
    return f"{head}" + "".join(f"[{p!r}]" for p in rest)
