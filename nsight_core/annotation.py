"""`annotate`: mark the code whose kernels are profiled, Nsight-Python style.

Inside a worker the current (config, run) is set by the worker loop, so each annotated call
becomes one NVTX start/end range named by `RunKey`. Outside a worker (or during warm-up)
`annotate` marks nothing: warm-up calls are never profiled.

Start/end ranges are process-wide, so kernels launched from other threads inside the range
are attributed too. Nesting and re-using a name within one run are errors, as in Nsight
Python; unlike Nsight Python, a failure swallowed by ``ignore_failures=True`` is still
reported (with its traceback) instead of being replaced by a dummy kernel. Entering a
profiled region calls the call's ANNOTATION-scope info collectors first, outside the range.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

from nsight_core.nsight.info_collector import collect_for_annotation
from nsight_core.protocol import NVTX_DOMAIN, KernelTiming, RunKey

P = ParamSpec("P")
R = TypeVar("R")

RegionTiming = tuple[float, list[KernelTiming]]
"""What an in-process timer measured of one annotated region: ns, and its kernels."""


@dataclass
class RunContext:
    """What the worker loop is doing now; `annotate` reads it."""

    config_id: int
    run: int
    profiling: bool
    on_range: Callable[[RunKey, BaseException | None, RegionTiming | None], None] | None = None
    sync: Callable[[], None] | None = None
    timer: Callable[[], Callable[[], RegionTiming]] | None = None
    """Starts the backend's in-process timer and returns its stopper: (elapsed ns, the
    region's kernels where the timer sees them); set for the in-process backends."""
    nvtx: bool = True
    """Open NVTX ranges (ncu needs them); off for the events backend, where a range would
    only add its cost, and the first call's `import nvtx`, to the timed call."""
    used: set[str] = field(default_factory=set)


_global_ctx: RunContext | None = None
_active: list[str] = []
_lock = threading.Lock()


def set_run_context(ctx: RunContext | None) -> None:
    """Called by the worker loop before each (config, run); None outside profiling."""
    global _global_ctx
    with _lock:
        _global_ctx = ctx
        _active.clear()


def current_run_context() -> RunContext | None:
    """What the loop is doing now; the thermal guard reads it to act before profiled runs."""
    return _global_ctx


class annotate:  # Nsight Python's lower-case name: a context manager and a decorator
    """Mark a region as one profiled call named `name`."""

    def __init__(self, name: str, ignore_failures: bool = False) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError("annotate(name): name must be a non-empty string")
        self.name = name
        self.ignore_failures = ignore_failures
        self._range: object | None = None
        self._key: RunKey | None = None
        self._stop: Callable[[], RegionTiming] | None = None

    def __enter__(self) -> annotate:
        ctx = _global_ctx
        with _lock:
            if _active:
                raise ValueError(
                    f"Nested annotations are not supported. Cannot enter annotation "
                    f"{self.name!r} while {_active[-1]!r} is active."
                )
            if ctx is not None and self.name in ctx.used:
                raise ValueError(
                    f"Annotation name {self.name!r} has already been used in this run. "
                    "Each annotation must have a unique name."
                )
            _active.append(self.name)
            if ctx is not None:
                ctx.used.add(self.name)
        if ctx is not None and ctx.profiling:
            collect_for_annotation(self.name)  # before the range and the clock start
            self._key = RunKey(self.name, ctx.config_id, ctx.run)
            if ctx.nvtx:
                self._range = start_range(self._key.range_name())
            if ctx.timer is not None:
                self._stop = ctx.timer()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        ctx = _global_ctx
        elapsed: RegionTiming | None = None
        try:
            if ctx is not None and ctx.sync is not None and exc is None:
                ctx.sync()  # keep the call's asynchronous work inside the range
            if self._stop is not None and exc is None:
                elapsed = self._stop()
        finally:
            self._stop = None
            if self._range is not None:
                end_range(self._range)
                self._range = None
            with _lock:
                if _active and _active[-1] == self.name:
                    _active.pop()
        if ctx is not None and ctx.on_range is not None and self._key is not None:
            ctx.on_range(self._key, exc, elapsed)
        self._key = None
        return bool(exc is not None and self.ignore_failures and isinstance(exc, Exception))

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R | None]:
        import functools

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R | None:
            with annotate(self.name, self.ignore_failures):
                return fn(*args, **kwargs)
            return None  # only reached when ignore_failures swallowed an exception

        return wrapper


def start_range(message: str) -> object:
    """Open a start/end range in our domain; ``end_range`` closes it (nvtx may be absent)."""
    import nvtx  # lazy: events jobs and CPU hosts never load it

    rid: Any = nvtx.start_range(message=message, domain=NVTX_DOMAIN)
    return rid if rid is not None else _NO_RANGE


def end_range(rid: object) -> None:
    if rid is _NO_RANGE:
        return
    import nvtx

    nvtx.end_range(rid)


_NO_RANGE = object()  # nvtx returns None when no tool is attached
