"""Work after the timed window on a GPU (issue 26, class 3): the numbers and the verdicts.

Run on a GPU host: ``python -m pytest -m gpu -s tests/gpu/test_window_guard_gpu.py``. The
first test times honest and hacked calls with the events timer in this process and prints,
per candidate and size, the window, the work seen after it (`ReplyMsg.after_ns`: its median
and largest), the host-inclusive latency and how often the output changed after the window;
the floor in collectors/late.py is to be set from the honest rows. The second runs the
catalogue's files of this class through the real pipeline under events and cupti. A hack
that passes unflagged there counts as caught only when it gained nothing: its time against
the reference is not below its honest twin's (a thread whose kernels still land inside
the window is timed in full, which is no escape).
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from nsight_core.collectors.events import Device, sync_all
from nsight_core.collectors.late import late_work_reason
from nsight_core.collectors.timers import call_timer
from nsight_core.protocol import RunKey
from nsight_core.results import ProfileResult
from tests.hacks import (
    legit_side_thread,
    legit_stream_joined,
    side_stream_unjoined,
    thread_after_return,
)
from tests.hacks.test_hacks import profile

SIZES = [(32, 64), (1024, 4096), (4096, 4096)]
RUNS = 15
HONEST = ("torch.softmax", "legit_stream_joined", "legit_side_thread")
HACKS = ("side_stream_unjoined", "thread_after_return")
TWIN = {"side_stream_unjoined": "legit_stream_joined", "thread_after_return": "legit_side_thread"}
GAIN = 0.9
"""A hack escapes when its time against the reference is below this share of its twin's."""


def _softmax(x: Any) -> Any:
    return torch.softmax(x, dim=-1)


CANDIDATES: dict[str, Callable[[Any], Any]] = {
    "torch.softmax": _softmax,
    "legit_stream_joined": legit_stream_joined.candidate,
    "legit_side_thread": legit_side_thread.candidate,
    "side_stream_unjoined": side_stream_unjoined.candidate,
    "thread_after_return": thread_after_return.candidate,
}


@pytest.mark.gpu
def test_events_sees_the_work_hacks_leave_after_the_window_and_none_of_honest_calls() -> None:
    device = Device("torch-cuda", "cuda:0")
    timer = call_timer("clock")
    lines = [
        f"{'candidate':22} {'size':>10} {'window us':>10} {'after med':>10} {'after max':>10} "
        f"{'latency us':>10} {'changed':>8} flagged"
    ]
    problems = []
    for name, fn in CANDIDATES.items():
        for rows, cols in SIZES:
            x = torch.randn(rows, cols, device="cuda")
            fn(x)
            sync_all()
            calls, changed, latencies = [], 0, []
            for run in range(RUNS):
                timed = timer.time_call(device, RunKey(name, 0, run), functools.partial(fn, x))
                sync_all()
                changed += bool(timed.changed_after())
                calls.append((timed.ns, timed.after_ns))
                latencies.append(timed.latency_ns or 0.0)
            after = [a for _n, a in calls if a is not None]
            flagged = late_work_reason(0, calls) is not None
            lines.append(
                f"{name:22} {rows:>5}x{cols:<5}"
                f"{statistics.median(n for n, _a in calls if n is not None) / 1e3:10.1f} "
                f"{statistics.median(after) / 1e3:10.1f} {max(after) / 1e3:10.1f} "
                f"{statistics.median(latencies) / 1e3:10.1f} {changed:>5}/{RUNS} {flagged}"
            )
            if name in HONEST and (flagged or changed):
                problems.append(f"{name} {rows}x{cols}: an honest call was flagged")
            big = rows * cols >= 1024 * 4096
            if name == "side_stream_unjoined" and big and not (flagged or changed):
                problems.append(f"{name} {rows}x{cols}: the unjoined stream was not seen")
    print("\n" + "\n".join(lines))
    assert not problems, problems


def _caught(result: ProfileResult, spec: str) -> tuple[str, str]:
    checks = [c for c in result.correctness if c.Annotation == spec]
    rows = [r for r in result.rows if r.Annotation == spec]
    verdict = "pass" if checks and all(c.Passed for c in checks) else "incorrect"
    trust = ",".join(sorted({r.Trust for r in rows})) or "-"
    reasons = "; ".join(
        sorted({x for c in checks for x in c.Reasons} | {x for r in rows for x in r.Reasons})
    )
    return f"{verdict} {trust}", reasons


def _ratio(result: ProfileResult, spec: str) -> float | None:
    """The candidate's time over the reference's in one job (None without both rows)."""
    times = {r.Annotation: r.AvgValue for r in result.rows if r.AvgValue is not None}
    ref = next((v for a, v in times.items() if a != spec), None)
    own = times.get(spec)
    return None if ref is None or own is None or not ref else float(own) / float(ref)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["events", "cupti"])
def test_the_class_through_the_pipeline(
    backend: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    problems = []
    lines = [f"== {backend}"]
    for rows, cols in SIZES[1:]:
        config = {"rows": rows, "cols": cols, "device": "cuda"}
        ratios: dict[str, float | None] = {}
        for name in (*HONEST[1:], *HACKS):  # a job each: a hack's thread must not reach others
            spec = f"{name}.py:candidate"
            job: Path = tmp_path_factory.mktemp(f"{backend}-{name}")
            result = profile([spec], job, backend=backend, config=config)
            got, reasons = _caught(result, spec)
            ratios[name] = ratio = _ratio(result, spec)
            shown = "-" if ratio is None else f"{ratio:.2f}"
            lines.append(f"{spec:34} {rows}x{cols}: {got:22} x{shown:5} {reasons[:150]}")
            honest = name.startswith("legit_")
            if honest and got not in ("pass ok", "pass noisy", "pass noisy,ok"):
                problems.append(f"{spec} {rows}x{cols} under {backend}: {got} ({reasons})")
            twin = ratios.get(TWIN.get(name, ""))
            gained = ratio is not None and twin is not None and ratio < GAIN * twin
            unflagged = got in ("pass ok", "pass noisy", "pass noisy,ok")
            if backend == "events" and not honest and unflagged and gained:
                problems.append(f"{spec} {rows}x{cols} under events: not caught ({shown}x)")
    print("\n" + "\n".join(lines))
    assert not problems, problems
