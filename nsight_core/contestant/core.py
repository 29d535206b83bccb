"""The contestant: the only process that imports and calls candidate code.

``python -m nsight_core.contestant PRIVATE_DIR TIMER`` (request jobs; started by the judge,
under ncu for that backend) connects to the judge's socket in its private directory, starts
its frameworks, CUDA context and timer (warm_up.py), and only then reads its job (a `ContestantJob`: what
to import, how to confine itself), so it can be started before the job exists. It imports
the reference, later the candidates, and then obeys: for each call message it makes
new arrays from the judge's slots, calls the annotation (inside an NVTX range named by
`RunKey` when an external profiler measures, or timed by the backend's clock), copies the
output into the judge's output slots and replies; each call runs under its guard
(call_guard.py), so no code of the candidate's runs between the call's return and that copy.
It decides nothing: it never sees a seed,
an expected output or the run plan, and every number it reports is an in-process screen.

Before any candidate is imported it imports the frameworks that are installed (so a
``torch.py`` next to a candidate cannot shadow them) and snapshots the attributes it relies
on (integrity.py); it reports every one rebound since, after imports and after each call.

``python -m nsight_core.contestant --function JOB_DIR`` is the `@kernel` mode: the user's own
function, which annotates itself, run per (config, run); it writes events.jsonl itself.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, TypeAdapter

from nsight_core.collectors.events import Device, detect_device, sync_all
from nsight_core.collectors.timers import TIMER_KINDS, CallTimer, TimedCall, call_timer
from nsight_core.contestant.call_guard import CallGuard, Guarded
from nsight_core.contestant.function_mode import function_main
from nsight_core.contestant.integrity import Watch, harness_module_names, shadowing_files
from nsight_core.contestant.triton_prep import TritonPrep
from nsight_core.contestant.warm_up import WarmUp
from nsight_core.errors import JobExit
from nsight_core.processes.sandbox import (
    default_fs_access,
    die_with_parent,
    process_age_s,
    restrict_this_process,
)
from nsight_core.processes.sandbox.env import inherited_paths
from nsight_core.protocol import (
    CONTESTANT_SOCKET,
    READY_LINE,
    FailureEvent,
    KernelTiming,
    Phase,
    RunKey,
)
from nsight_core.runtime.check import aliased, mutated, self_overlapping, snapshot_inputs
from nsight_core.runtime.exchange import SlotTable
from nsight_core.runtime.leaves import leaves
from nsight_core.runtime.loader import load_callable
from nsight_core.runtime.messages import (
    CallMsg,
    ContestantJob,
    ExitMsg,
    HelloMsg,
    JudgeMsg,
    LoadMsg,
    ReplyMsg,
)
from nsight_core.runtime.process import exit_native, exit_now, failure_event

_JUDGE_MSG = TypeAdapter[JudgeMsg](JudgeMsg)


def _die_with_judge(sock: socket.socket) -> None:
    """A watchdog: when the judge's end of the socket closes, end this process group."""
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLRDHUP | select.POLLHUP | select.POLLERR)
    while True:
        for _fd, mask in poller.poll():
            if mask & (select.POLLRDHUP | select.POLLHUP | select.POLLERR):
                with contextlib.suppress(OSError):
                    os.killpg(os.getpgrp(), signal.SIGKILL)
                os._exit(int(JobExit.INTERNAL))


class Contestant:
    """Request mode: import the annotations, then call them as the judge says."""

    def __init__(
        self,
        job: ContestantJob,
        not_confined: str | None = None,
        timer: CallTimer | None = None,
    ) -> None:
        self.job = job
        self.not_confined = not_confined
        self.timer = timer if timer is not None else call_timer(job.child_timer)
        self.fns: dict[str, Callable[..., Any]] = {}
        self.slots = SlotTable()
        self.device: Device | None = None
        # Bound before any candidate code runs; integrity.py watches them for rebinding.
        self._perf_counter_ns = time.perf_counter_ns
        self.guard = CallGuard()  # so are the guard's switches (call_guard.py)
        self.watch = Watch()
        self._harness = harness_module_names()  # made before any user code is imported
        self._sock: socket.socket | None = None
        self._reader: IO[bytes] | None = None
        self._reported: set[str] = set()
        self.startup_s: dict[str, float] = {}
        self.primed = False
        """Whether the prime ran (early_cuda.py): told in the first hello, before any
        candidate is imported, so its report's first result is known to be the prime."""
        self.prep: TritonPrep | None = None
        """Triton's start on a side thread (cold ncu jobs), joined before the candidates load."""

    def _take_startup_s(self) -> dict[str, float]:
        """The start-up account, in the first hello only (the judge adds up what it gets)."""
        taken, self.startup_s = self.startup_s, {}
        return taken

    def _join_prep(self) -> None:
        """Wait for Triton's start, if it runs: the candidates may be Triton's, and what it
        imports must be in place before the watch's snapshot. Its time and the wait for it
        go into the candidates' hello (for the benchmarks)."""
        if self.prep is None:
            return
        t0 = time.monotonic()
        self.prep.join()
        if self.prep.error is None and self.prep.seconds:
            self.startup_s["triton_thread"] = self.prep.seconds
            self.startup_s["triton_wait"] = round(time.monotonic() - t0, 4)
        self.prep = None

    def _new_changes(self) -> list[str]:
        changes = [c for c in self.watch.changes() if c not in self._reported]
        self._reported.update(changes)
        return changes

    def load(self, specs: list[str]) -> HelloMsg:
        """Import ``specs``: the reference alone at start, the candidates on the judge's
        LoadMsg once the reference's calls are done."""
        t0 = time.monotonic()
        source = Path(self.job.source_file) if self.job.source_file else None
        ref_source = (
            Path(self.job.reference_source_file) if self.job.reference_source_file else None
        )
        workdir = Path(self.job.workdir)
        failures: list[FailureEvent] = []
        integrity: list[str] = []
        for spec in specs:
            home = ref_source if spec == self.job.annotations[0] and ref_source else source
            try:
                named = self.job.callables[spec]
                self.fns[spec] = load_callable(named, workdir=workdir, source_file=home)
            except Exception as exc:
                failures.append(failure_event(spec, "import", exc))
            else:
                if spec == self.job.annotations[0]:  # the reference: loaded before candidates
                    self.watch.add_module(getattr(self.fns[spec], "__module__", "") or "")
            integrity += [f"{c} (changed while {spec!r} was imported)" for c in self._new_changes()]
        dirs = {workdir, *(Path(m.__file__).parent for m in _user_modules())}
        return HelloMsg(
            loaded=list(self.fns),
            failures=failures,
            integrity=integrity,
            shadowed=shadowing_files(sorted(dirs), self._harness),
            confined=self.job.confine != "off" and self.not_confined is None,
            notes=self._notes(),
            host_s={**self._take_startup_s(), "load": round(time.monotonic() - t0, 4)},
            primed=self.primed,
        )

    def _notes(self) -> list[str]:
        notes = [self.not_confined] if self.not_confined else []
        notes += self.timer.notes()
        return notes

    def serve(self, sock: socket.socket, reader: IO[bytes]) -> int:
        """Obey the judge on ``sock`` (already connected; its job line already read)."""
        self._sock = sock
        # Started only now, after confinement: Landlock binds the threads that exist later.
        threading.Thread(target=_die_with_judge, args=(sock,), daemon=True).start()
        self._reader = reader
        self._send(self._load_untimed(self.job.annotations[:1]))
        while True:
            line = self._reader.readline()
            if not line:
                return int(JobExit.OK)
            msg = _JUDGE_MSG.validate_json(line)
            if isinstance(msg, ExitMsg):
                return int(JobExit.OK)
            if isinstance(msg, LoadMsg):
                self._join_prep()  # its imports end before the watch's snapshot
                self.watch.snapshot()  # what the reference's calls imported (cupy, triton)
                self.guard.bind()  # and its arrays, if they take attributes (cupy)
                # The timing path's state (timer, device, flush buffer), as candidates find it.
                self.watch.watch_state(self, volatile=("startup_s",))
                self._send(self._load_untimed(self.job.annotations[1:]))
                continue
            self._send(self.call(msg))

    def _load_untimed(self, specs: list[str]) -> HelloMsg:
        """`load`, as harness work that no profiler measures (a module's import-time
        kernels are no call's)."""
        with self.timer.harness(",".join(specs), None, None, None):
            return self.load(specs)

    def _send(self, msg: BaseModel) -> None:
        assert self._sock is not None
        self._sock.sendall(msg.model_dump_json().encode() + b"\n")

    def call(self, msg: CallMsg) -> ReplyMsg:
        # Nothing of the candidate's may run between its call's return and the moment the
        # output is in the judge's slot (call_guard.py): the collector is off until then.
        guard = self.guard.open()
        try:
            return self._call(msg, guard)
        finally:
            guard.release()

    def _call(self, msg: CallMsg, guard: Guarded) -> ReplyMsg:
        t0 = time.monotonic()
        fn = self.fns[msg.annotation]
        run = msg.run
        # The harness's work around the call is in ranges of its own (timers.py): under ncu
        # an untimed call leaves nothing in the report, and a timed call's harness kernels
        # are told apart from work a candidate does outside its timed range.
        harness = self.timer.harness(msg.annotation, msg.config_id, run, msg.nonce)
        try:
            with harness:
                self.slots.attach(msg.new_slots)
                self.slots.copied.clear()
                mask = bytes.fromhex(msg.mask) if msg.mask else None
                args, kwargs = self.slots.materialize(msg.inputs, mask)
                if run is None:  # untimed: nothing to gain from reading the inputs early
                    self.slots.unmask()
                if self.device is None:
                    self.device = detect_device((args, kwargs))
                self.device.sync()
                t1 = time.monotonic()
                # Mutation is the judge's finding, from its own input slots (judge/calls.py);
                # only arrays that are copies of their slot (a strided layout, a device
                # crossing) are compared here, so no other copy adds harness kernels.
                own = (
                    _copied_roots(self.slots.copied, args, kwargs)
                    if self.job.check_mutation
                    else None
                )
                snap = snapshot_inputs(own) if own is not None else None
        except Exception as exc:
            return ReplyMsg(
                nonce=msg.nonce,
                ok=False,
                failure=failure_event("<harness>", "profile", exc, config_id=msg.config_id),
            )
        phase: Phase = "profile" if run is not None else "warmup"
        ns: float | None = None
        kernels: list[KernelTiming] = []
        outside: list[str] = []
        notes: list[str] = []
        late = TimedCall(None)  # what the timer saw after the window (timed calls only)
        call = guard.wrap(lambda: fn(*args, **kwargs))  # its tail runs inside the window
        try:
            if run is None:
                out = self.timer.untimed_call(msg.annotation, msg.config_id, msg.nonce, call)
            else:
                timed = self.timer.timed_call(
                    self.device,
                    RunKey(msg.annotation, msg.config_id, run),
                    msg.nonce,
                    call,
                    self.slots.unmask,  # the inputs become readable as the window opens
                    settle=guard.settle,  # right after the window's end, before its snapshot
                )
                out, ns, kernels, outside = timed.out, timed.ns, timed.kernels, timed.outside
                late = timed
                if self.device is not None:  # read before any harness code runs on the GPU
                    notes = self.device.persisting_l2.left_set(self.device.stream())
        except Exception as exc:
            return ReplyMsg(
                nonce=msg.nonce,
                ok=False,
                failure=failure_event(
                    msg.annotation, phase, _from_user_code(exc), config_id=msg.config_id, run=run
                ),
                integrity=self._new_changes(),
            )
        # The output and inputs as the window left them (already, where the timer read the
        # output), before any check reads them; what the guard named fails the call.
        out = guard.settle(out)
        args, kwargs = guard.settle_inputs(args, kwargs)
        if own is not None:
            own = {name: _roots(args, kwargs)[name] for name in own}
        t2 = time.monotonic()
        reasons: list[str] = [*guard.findings]
        # Profiled under ncu until the reply: the output slot is the judge's to read only
        # then, so no work meanwhile may go unseen.
        with self.timer.harness(msg.annotation, msg.config_id, run, msg.nonce):
            if snap is not None and own is not None:
                reasons += [f"mutated input {name}" for name in mutated(snap, own)]
            if self.job.check_aliasing:
                reasons += [f"output aliases {name}" for name in aliased(out, (args, kwargs))]
                if msg.annotation != self.job.annotations[0]:  # the reference's is its own
                    reasons += self_overlapping(out)
            t2b = time.monotonic()
            node = self.slots.write_output(out, msg.out_slots) if msg.want_output else None
            sync_all()
        reasons += late.changed_after()  # a thread or stream still writing has had till now
        t3 = time.monotonic()
        changes = self._new_changes()
        t4 = time.monotonic()
        return ReplyMsg(
            nonce=msg.nonce,
            ok=True,
            output=node,
            ns=ns,
            kernels=kernels,
            reasons=reasons,
            outside=outside,
            after_ns=late.after_ns,
            after_parts=late.after_parts,
            latency_ns=late.latency_ns,
            integrity=changes,
            notes=notes,
            device=self.device.name if self.device else None,
            host_s={
                "inputs": t1 - t0,
                "call": t2 - t1,
                "structure": t2b - t2,
                "output": t3 - t2b,
                "watch": t4 - t3,
            },
        )


def _copied_roots(ids: set[int], args: Any, kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The arguments, by name (``args[1]``, ``x``), that hold an array in ``ids`` (copies of
    their slots); None when none does."""
    if not ids:  # the common case: every array is a view of its slot
        return None
    roots = _roots(args, kwargs)
    own = {name: v for name, v in roots.items() if any(id(x) in ids for x in leaves(v))}
    return own or None


def _roots(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments by name (``args[1]``, ``x``)."""
    return {f"args[{i}]": v for i, v in enumerate(args)} | {str(k): v for k, v in kwargs.items()}


def _from_user_code(exc: BaseException) -> BaseException:
    """``exc`` with its traceback starting at the first frame outside this package: the
    harness's frames (the call loop, the timer's window) say nothing the candidate can act
    on, and every failure's traceback is carried into the answer."""
    tb = exc.__traceback__
    while tb is not None and str(tb.tb_frame.f_globals.get("__name__", "")).startswith(
        "nsight_core."
    ):
        tb = tb.tb_next
    return exc if tb is None else exc.with_traceback(tb)


def _user_modules() -> list[Any]:
    return [
        m
        for name, m in list(sys.modules.items())
        if name.startswith("nspy_user_") and getattr(m, "__file__", None)
    ]


def confine(job: ContestantJob) -> str | None:
    """Apply the job's Landlock allow-list to this process; why not, when it cannot."""
    if job.confine == "off":
        return None
    # The sandbox's private HOME and TMPDIR of this process (made by the judge's sandbox
    # before this process started): JIT caches and, under ncu, its injected library's lock
    # directory live there.
    own = [Path(p) for p in inherited_paths(("HOME", "TMPDIR")) if p.startswith("/")]
    access = default_fs_access(
        Path(job.workdir),
        read=[Path(p) for p in job.read_dirs],
        write=[*(Path(p) for p in job.write_dirs), *own],
    )
    try:
        restrict_this_process(access)
    except (OSError, RuntimeError) as exc:
        return f"file access not confined: {exc}"
    return None


def main(argv: list[str]) -> int:
    # Die with the parent (ncu, the judge or the pipeline). Not watch_parent_pipe: its
    # watcher would be a descendant that ncu waits for, and the job would never end. When the
    # judge dies its socket closes, and the contestant's watchdog ends the whole group.
    die_with_parent()
    if len(argv) == 3 and argv[1] == "--function":
        code = function_main(Path(argv[2]))
        exit_native(code, python_atexit=True)  # the user's function's own callbacks run
        return code
    prestarted = argv[3:] == ["--prestarted"]
    if len(argv) not in (3, 4) or argv[2] not in TIMER_KINDS or (len(argv) == 4 and not prestarted):
        sys.stderr.write(
            "usage: python -m nsight_core.contestant PRIVATE_DIR "
            f"{'|'.join(TIMER_KINDS)} [--prestarted]\n"
        )
        return int(JobExit.BAD_JOB)
    timer_kind = argv[2]
    # Connect first: the judge accepts when it is ready to send the job, and this process
    # goes on starting meanwhile (a pre-started one waits for its job at the readline).
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(Path(argv[1]) / CONTESTANT_SOCKET))
    reader = sock.makefile("rb")
    t0 = time.monotonic()
    warm = WarmUp(prestarted=prestarted, timer_kind=timer_kind)
    timer = warm.before_job()
    t3 = time.monotonic()
    sock.sendall(READY_LINE + b"\n")  # started: nothing of this process touches the GPU now
    line = reader.readline()
    if not line:  # the judge ended before there was a job (a standby retired)
        return int(JobExit.OK)
    t4 = time.monotonic()
    try:
        cjob = ContestantJob.model_validate_json(line)
    except Exception as exc:
        sys.stderr.write(f"nsight_core.contestant: bad job: {exc}\n")
        return int(JobExit.BAD_JOB)
    if cjob.child_timer != timer_kind:
        sys.stderr.write("nsight_core.contestant: the job's timer is not the one started\n")
        return int(JobExit.BAD_JOB)
    not_confined = confine(cjob)  # before any candidate code and before any thread
    contestant = Contestant(cjob, not_confined, timer)
    contestant.primed = warm.primed
    contestant.prep = warm.after_confine()
    contestant.startup_s = {
        "process": round(t0 - (time.monotonic() - process_age_s()), 4),
        **warm.seconds,
        "waited_for_job": round(t4 - t3, 4),
        "confine": round(time.monotonic() - t4, 4),
    }
    code = contestant.serve(sock, reader)
    # torch's interpreter teardown takes 0.5-0.9 s, and a thread a candidate left running
    # would hold a normal exit until the time limit. ncu has every result of a request job
    # before the exit (each kernel's or range's is sent when it is profiled), so C's exit
    # handlers and the CUDA context's teardown are skipped too (docs/sandbox.md).
    exit_now(code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
