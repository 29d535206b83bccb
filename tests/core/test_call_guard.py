"""The call's guard (contestant/call_guard.py): no code of a candidate's runs between its
call's return and the moment the harness holds its output.

Every test calls real candidate code the way the contestant does (`CallGuard.open`, the
wrapped call, `settle` where the timer reads its end, `release` once the output is in the
judge's slot), and checks both sides: what the candidate's code managed to run, and what
the harness was handed.
"""

from __future__ import annotations

import gc
import signal
import sys
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from nsight_core.collectors.events import Device
from nsight_core.collectors.timers import call_timer, tampering_affects
from nsight_core.contestant.call_guard import MAX_DEPTH, CallGuard, Guarded
from nsight_core.contestant.integrity import Watch
from nsight_core.protocol import RunKey
from nsight_core.runtime.check import snapshot_inputs

KEY = RunKey("cand", 0, 0)


@pytest.fixture
def guard() -> Iterator[CallGuard]:
    """A guard made before any candidate code runs, as the contestant makes its own; a test
    that fails midway still leaves the collector, the hooks and torch's stacks as found."""
    made = CallGuard()
    yield made
    if made.open_call is not None:
        made.open_call.release()
    assert sys.getprofile() is made.profile and sys.gettrace() is made.trace
    assert torch._C._len_torch_function_stack() == 0
    assert torch._C._len_torch_dispatch_stack() == 0


def _run(guard: CallGuard, fn: Callable[[], Any]) -> tuple[Guarded, Any]:
    """One call as the contestant makes it (untimed: the contestant settles after)."""
    g = guard.open()
    out = g.wrap(fn)()
    return g, g.settle(out)


# -- hooks: removed inside the window -----------------------------------------------------


def test_a_profile_function_the_call_leaves_set_never_runs_after_the_window(
    guard: CallGuard,
) -> None:
    seen: list[str] = []

    def candidate() -> torch.Tensor:
        def hook(frame: FrameType, event: str, arg: Any) -> None:
            seen.append(f"{event}:{frame.f_code.co_name}")

        sys.setprofile(hook)
        return torch.zeros(4)

    g = guard.open()
    out = g.wrap(candidate)()
    ran = len(seen)
    # Once the wrapped call has returned, everything the harness does is unseen: the timer's
    # end read, the snapshot, the copy.
    snapshot_inputs(((g.settle(out),), {}))
    assert len(seen) == ran and sys.getprofile() is guard.profile
    g.release()
    assert any("profile function set (sys.setprofile: " in f for f in g.findings)
    assert all("after the timed window" in f for f in g.findings)


def test_a_trace_function_the_call_leaves_set_is_removed_and_named(guard: CallGuard) -> None:
    lines: list[int] = []

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        lines.append(frame.f_lineno)
        return tracer

    def candidate() -> int:
        sys.settrace(tracer)
        return 1

    g, _ = _run(guard, candidate)
    ran = len(lines)
    snapshot_inputs(((torch.ones(2),), {}))
    g.release()
    assert len(lines) == ran and sys.gettrace() is guard.trace
    assert any("trace function set (sys.settrace: " in f for f in g.findings)


def test_a_hook_set_between_calls_is_removed_before_the_next_call(guard: CallGuard) -> None:
    # As an import (or a thread of the candidate's) would leave it.
    calls: list[str] = []
    sys.setprofile(lambda frame, event, arg: calls.append(event))
    g = guard.open()
    assert sys.getprofile() is guard.profile
    g.release()
    assert any(f.startswith("code run between calls left a profile function") for f in g.findings)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is Python 3.12+")
def test_a_monitoring_tool_the_call_leaves_registered_is_freed_and_named(
    guard: CallGuard,
) -> None:
    seen: list[str] = []
    mon: Any = getattr(sys, "monitoring")  # noqa: B009  (absent from 3.11's stubs)

    def harness_code() -> int:
        return 1

    def candidate() -> int:
        mon.use_tool_id(4, "late")
        mon.register_callback(4, mon.events.PY_START, lambda code, at: seen.append("start"))
        mon.set_events(4, mon.events.PY_START)
        mon.set_local_events(4, harness_code.__code__, mon.events.LINE)
        return 1

    g, _ = _run(guard, candidate)
    ran = len(seen)
    harness_code()
    g.release()
    assert len(seen) == ran and mon.get_tool(4) is None
    assert any("sys.monitoring tool registered (id 4: 'late')" in f for f in g.findings)


# -- the collector: off until the output is in the judge's slot ---------------------------


class _Finisher:
    def __init__(self, finish: Callable[[], None]) -> None:
        self.finish = finish
        self.me = self  # a cycle: only the collector frees it

    def __del__(self) -> None:
        self.finish()


def test_a_finalizer_waits_until_the_output_is_in_the_judges_slot(guard: CallGuard) -> None:
    assert gc.isenabled()
    out = torch.zeros(8)

    pad: list[Any] = []

    def candidate() -> torch.Tensor:
        gc.enable()  # the call may turn the collector back on ...

        def finish() -> None:
            out.fill_(1.0)

        _Finisher(finish)
        # ... and fill its youngest generation, so the harness's first allocation collects.
        while gc.isenabled() and gc.get_count()[0] < gc.get_threshold()[0]:
            pad.append([])
        return out

    g, settled = _run(guard, candidate)
    junk: list[list[int]] = [
        [] for _ in range(10 * gc.get_threshold()[0])
    ]  # the harness allocates freely
    del junk
    assert not gc.isenabled()
    assert float(settled.sum()) == 0.0  # the window's output: the finalizer has not run
    g.release()
    assert gc.isenabled()
    gc.collect()
    assert float(out.sum()) == 8.0  # it ran once nobody read that output
    assert g.findings == []  # nothing to name: the judge reads the output as the window left it


def test_the_collector_stays_as_the_harness_had_it_and_a_stale_call_is_released(
    guard: CallGuard,
) -> None:
    gc.disable()
    try:
        g = guard.open()
        g.release()
        assert not gc.isenabled()  # off before the call: left off
    finally:
        gc.enable()
    guard.open()  # a harness that failed before releasing ...
    assert not gc.isenabled()
    guard.open().release()  # ... is released at the next call
    assert gc.isenabled()


# -- torch's modes: popped before any harness operation -----------------------------------


def test_modes_the_call_leaves_on_torchs_stacks_are_popped_and_named(guard: CallGuard) -> None:
    seen: list[str] = []

    class Dispatch(TorchDispatchMode):  # type: ignore[no-untyped-call]
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            seen.append(f"dispatch {func}")
            return func(*args, **(kwargs or {}))

    class Function(TorchFunctionMode):
        def __torch_function__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            seen.append(f"function {func}")
            return func(*args, **(kwargs or {}))

    def candidate() -> torch.Tensor:
        out = torch.zeros(4)
        Dispatch().__enter__()  # type: ignore[no-untyped-call]
        Function().__enter__()  # type: ignore[no-untyped-call]
        return out

    flags = _dispatch_flags()
    try:
        g, out = _run(guard, candidate)
        snapshot_inputs(((out,), {}))  # the harness's detach and clone
        (out + 1).sum()
        g.release()
    finally:
        _dispatch_flags(flags)  # the mode's __enter__ set them; its __exit__ never ran
    assert seen == []
    assert any("torch dispatch mode active (" in f and "Dispatch" in f for f in g.findings)
    assert any("torch function mode active (" in f and "Function" in f for f in g.findings)


def _dispatch_flags(flags: tuple[Any, ...] | None = None) -> tuple[Any, ...]:
    """torch's Python-side flags a dispatch mode's ``__enter__`` sets, put back (so later
    tests in this process see torch as it was); the ones found."""
    from torch.utils import _python_dispatch as pd

    names = (
        "_is_in_torch_dispatch_mode",
        "_is_in_non_infra_torch_dispatch_mode",
        "_is_in_any_mode_without_ignore_compile_internals",
    )
    found = tuple(getattr(pd, n) for n in names)
    if flags is not None:
        for n, v in zip(names, flags, strict=True):
            setattr(pd, n, v)
        pd.set_is_in_mode_without_ignore_compile_internals(flags[2])  # type: ignore[attr-defined]
    return found


# -- in a timer, cost, and the watch ------------------------------------------------------


def test_the_timers_snapshot_reads_the_output_as_the_window_left_it(guard: CallGuard) -> None:
    def candidate() -> Any:
        out = torch.zeros(8)

        class Finish(tuple[Any, ...]):
            def __iter__(self) -> Iterator[Any]:
                out.fill_(1.0)
                return super().__iter__()

        return Finish((out,))

    # Without the guard the timer's snapshot itself runs the candidate's code: the hole.
    bare = call_timer("clock").time_call(Device("cpu"), KEY, candidate)
    assert float(bare.snapshot.roots[0][1][0].sum()) == 8.0
    g = guard.open()
    timed = call_timer("clock").time_call(Device("cpu"), KEY, g.wrap(candidate), g.settle)
    g.release()
    assert type(timed.out) is tuple and float(timed.out[0].sum()) == 0.0
    assert timed.changed_after() == []


def test_the_guard_costs_a_few_microseconds_a_call(guard: CallGuard) -> None:
    x, out = torch.zeros(16), torch.zeros(16)
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        g = guard.open()
        got = g.settle(g.wrap(lambda: out)())
        g.settle_inputs((x,), {})
        g.release()
    per_call_us = (time.perf_counter() - t0) / n * 1e6
    assert got is out
    # About 14 us on an idle 2-core VM, half of it the scan of every signal's handler
    # (signal_guard.py); generous for a loaded CI host.
    assert per_call_us < 120, per_call_us


def test_the_guard_is_watched() -> None:
    from nsight_core.contestant import call_guard

    class Harness:
        def __init__(self) -> None:
            self.guard = CallGuard()

    harness = Harness()
    watch = Watch()
    watch.watch_state(harness)
    real_open = CallGuard.open
    before = harness.guard.gc_disable
    try:
        CallGuard.open = lambda self: real_open(self)  # type: ignore[method-assign]
        harness.guard.gc_disable = lambda: None
        g = harness.guard.open()  # the call under way is no finding
        found = watch.changes()
        g.release()
    finally:
        CallGuard.open = real_open  # type: ignore[method-assign]
        harness.guard.gc_disable = before
    assert "nsight_core.contestant.call_guard.CallGuard.open" in found
    assert "nsight_core.contestant.call_guard.CallGuard().gc_disable (replaced)" in found
    assert not any("open_call" in f for f in found)
    # On the events timer's reply path: a rebinding there makes its rows suspicious.
    assert tampering_affects(_events(), "nsight_core.contestant.call_guard.CallGuard.open") == (
        "timer"
    )
    assert call_guard.MAX_DEPTH == MAX_DEPTH


def _events() -> Any:
    from nsight_core.collectors import get_backend

    return get_backend("events")


def test_a_timer_or_signal_handler_the_call_leaves_is_taken_back_and_named(
    guard: CallGuard,
) -> None:
    fired: list[int] = []

    def candidate() -> torch.Tensor:
        signal.signal(signal.SIGUSR1, lambda signum, frame: fired.append(signum))
        signal.setitimer(signal.ITIMER_REAL, 30.0)
        signal.setitimer(signal.ITIMER_VIRTUAL, 30.0)
        return torch.zeros(4)

    g = guard.open()
    g.settle(g.wrap(candidate)())
    g.release()
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getitimer(signal.ITIMER_VIRTUAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    assert sum("interval timer armed" in f for f in g.findings) == 2
    assert any("a handler for signal " in f and "(signal.signal)" in f for f in g.findings)
    assert not fired


def test_a_watchdog_disarmed_before_the_call_returns_is_no_finding(guard: CallGuard) -> None:
    def candidate() -> torch.Tensor:
        previous = signal.signal(signal.SIGALRM, lambda signum, frame: None)
        signal.setitimer(signal.ITIMER_REAL, 30.0)
        try:
            return torch.zeros(4)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0.0)
            signal.signal(signal.SIGALRM, previous)

    g = guard.open()
    g.settle(g.wrap(candidate)())
    g.release()
    assert g.findings == []


def test_a_timer_left_by_a_call_that_raised_is_not_blamed_on_the_next(guard: CallGuard) -> None:
    def raising() -> torch.Tensor:
        signal.setitimer(signal.ITIMER_REAL, 30.0)
        raise RuntimeError("the candidate failed")

    g = guard.open()
    with pytest.raises(RuntimeError):
        g.wrap(raising)()  # the harness reports the failure; it never settles this call
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # disarmed at the tail
    nxt = guard.open()
    nxt.settle(nxt.wrap(lambda: torch.zeros(4))())
    nxt.release()
    assert nxt.findings == []
