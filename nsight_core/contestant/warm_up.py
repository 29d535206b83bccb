"""The contestant's start: every step it takes before its job, by start kind and timer.

A request job's critical path is its contestant's start, so each step below is placed where
it overlaps something else or where the job does not wait for it. Which steps run depends on
two things only: whether the contestant is *pre-started* (its start is off any job's path:
a standby waiting for a job of its settings) or *cold* (a job waits for it), and its timer
(``range``: ncu measures from outside; ``clock`` and ``cupti``: in-process timers).

| step | cold, range | cold, clock or cupti | pre-started, range | pre-started, clock or cupti |
|---|---|---|---|---|
| cuda_thread | yes | yes | yes | yes |
| prime | yes | no | yes | no |
| frameworks | numpy, torch | numpy, torch | numpy, torch, triton | numpy, torch, triton |
| timer | yes | yes | yes | yes |
| gpu_path | no | no | yes | yes, with the flush buffer |
| triton_thread | yes | no | no | no |

- **cuda_thread**: the driver's start and the primary context on a side thread while the
  frameworks import (early_cuda.py); torch's own CUDA start then finds the context made.
- **prime**: under ncu the side thread also launches one empty kernel, so ncu's set-up at a
  process's first profiled kernel overlaps the imports instead of the first timed call.
- **frameworks**: imported before any job code, so a candidate cannot shadow them; a
  pre-started one also takes Triton's slow import, off the job's path.
- **timer**: what the timer loads (NVTX, libcupti), before confinement and any candidate.
- **gpu_path**: a pre-started contestant runs the harness's own GPU path once (the output's
  snapshot and comparison, one Triton launch of ours; the in-process timers' L2 flush
  buffer), inside an untimed range that ncu leaves out.
- **triton_thread**: a cold ncu job's Triton start (its source hashing) runs on a side
  thread once the contestant is confined, while the reference's calls wait on ncu
  (triton_prep.py). A pre-started contestant did it in ``gpu_path``; the in-process timers
  keep their process quiet while they time.

`WarmUp.plan` is this table as code; a test holds the two equal. Every step is best-effort:
none may fail a job, and each records its time for ``phase_seconds``.
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass

from nsight_core.collectors.events import Device, sync_all
from nsight_core.collectors.timers import CallTimer, call_timer, timer_class
from nsight_core.contestant.triton_prep import TritonPrep
from nsight_core.runtime.check import aliased, mutated, snapshot_inputs
from nsight_core.runtime.early_cuda import EarlyCuda
from nsight_core.runtime.process import (
    FRAMEWORKS,
    PRESTART_FRAMEWORKS,
    init_cuda,
    preload_frameworks,
)

WARM_UP = "warm-up"
"""The untimed range a pre-started contestant warms its GPU path in (``u:load:warm-up``)."""

START_KINDS = ("cold", "pre-started")


@dataclass(frozen=True)
class Steps:
    """Which warm-up steps one contestant takes (the module's table, one column)."""

    prime: bool
    frameworks: tuple[str, ...]
    gpu_path: bool
    flush_buffer: bool
    triton_thread: bool

    @classmethod
    def plan(cls, *, prestarted: bool, timer_kind: str) -> Steps:
        external = timer_class(timer_kind).external  # a profiler outside reads this process
        return cls(
            prime=external,
            frameworks=PRESTART_FRAMEWORKS if prestarted else FRAMEWORKS,
            gpu_path=prestarted,
            flush_buffer=prestarted and not external,
            triton_thread=external and not prestarted,
        )


class WarmUp:
    """One contestant's start: `before_job` up to its ready line, `after_confine` once it
    is confined; `seconds` is its account for ``phase_seconds`` (``contestant.*``)."""

    def __init__(self, *, prestarted: bool, timer_kind: str) -> None:
        self.steps = Steps.plan(prestarted=prestarted, timer_kind=timer_kind)
        self.timer_kind = timer_kind
        self.seconds: dict[str, float] = {}
        self.primed = False
        """Whether the prime ran: told in the first hello, before any candidate is imported,
        so the report's first result is known to be the prime."""

    def before_job(self) -> CallTimer:
        """Every step up to the ready line; the timer, started."""
        t0 = time.monotonic()
        early = EarlyCuda(prime=self.steps.prime)
        preload_frameworks(self.steps.frameworks)
        t1 = time.monotonic()
        init_cuda(early)
        t2 = time.monotonic()
        timer = call_timer(self.timer_kind)
        timer.start()
        if self.steps.gpu_path:
            # Untimed: ncu leaves the range out (protocol.NCU_NVTX_EXCLUDE), so nothing of
            # it is profiled or reported.
            with timer.harness(WARM_UP, None, None, None):
                warm_gpu_path(flush=self.steps.flush_buffer)
        t3 = time.monotonic()
        self.primed = early.primed is not None
        self.seconds = {
            "frameworks": round(t1 - t0, 4),
            "cuda": round(t2 - t1, 4),
            # The side thread's own time, when it made the context (it overlapped "frameworks").
            **({"cuda_thread": early.seconds} if early.error is None and early.seconds else {}),
            **({"prime": early.primed} if early.primed is not None else {}),
            "timer": round(t3 - t2, 4),
        }
        return timer

    def after_confine(self) -> TritonPrep | None:
        """The steps that run confined: Triton's start, where the table says so."""
        return TritonPrep() if self.steps.triton_thread else None


def warm_gpu_path(flush: bool = True) -> None:
    """Run the harness's own GPU path once, before any job exists: CUDA loads the kernels of
    the output's snapshot and its comparison, Triton its driver utilities and a launcher
    (one kernel of ours), and with ``flush`` the L2 flush buffer (twice the L2's size) is
    allocated and its kernel loaded. Otherwise the job's first calls pay for each. A failure
    here changes nothing: the job's calls load what they need."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    with contextlib.suppress(Exception):
        if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            return
        x = torch.randn(64, 64, device="cuda")
        if flush:
            Device("torch-cuda").flush_l2()
        snap = snapshot_inputs(((x,), {}))
        mutated(snap, ((x,), {}))
        aliased(x.clone(), ((x,), {}))
        sync_all()
    if "triton" in sys.modules:
        with contextlib.suppress(Exception):
            from nsight_core.contestant import warm_triton  # lazy: only where triton is

            warm_triton.launch_once(torch)
