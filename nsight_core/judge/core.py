"""The judge: makes the inputs, runs the reference, checks every output. Never imports candidates.

Started by judge/boot.py (which starts the contestant, then imports this), before or just
as its job exists: the job is handed over on a socket (processes/standby.py), at once for a
cold job, later for a pre-started judge; one path either way. It

1. draws a seed from the OS (`secrets`) that never leaves this process, and starts the
   contestant (contestant.py, via seat.py) in a private temporary directory outside the
   store, wrapped by the backend (under ncu for that backend, so only the contestant is
   profiled); the contestant gets its job, what to import, only over its socket;
2. imports the reference and the input maker itself (trusted by contract);
3. for every call the contestant makes, untimed (warm-up and check) or timed, makes fresh
   inputs (an untimed repeat or decoy, probes.py: an earlier call's again, or nearly),
   hands them over through shared slots, runs the reference on its own copy, and
   compares the output that comes back: there is no separate check phase to tell apart,
   and whether the check can tell work from no work at all is asked on the way
   (discrimination.py);
4. writes events.jsonl for the pipeline: verdicts, failures, the ranges and samples of
   candidates that passed every check of their config, and anything suspect (rebound
   timers or framework functions, messages nobody asked for, shadowing files).

A candidate that fails a check is called no more on that config, and none of its timed runs
on that config is reported.

The judge is one trust boundary: everything in this module runs in the process that may be
trusted with verdicts, and nothing else should import it.
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from nsight_core.collectors.base import Backend, Wrapped
from nsight_core.collectors.events import sync_all
from nsight_core.collectors.ranges import CALLS_FILE, IssuedCall, write_issued
from nsight_core.collectors.timers import tampering_affects
from nsight_core.errors import ErrorClass, JobExit
from nsight_core.judge.call_limit import CallLimit, ended_by_judge, lost_call
from nsight_core.judge.discrimination import BLIND_PAIRS, Discrimination, replay_passes
from nsight_core.judge.gpu_state import GpuSampler
from nsight_core.judge.guard import BoundTools, CandidateImportGuard
from nsight_core.judge.in_flight import InFlight
from nsight_core.judge.probes import DECOY_ATTEMPTS, Extra, ProbePlan, draw_plan, make_decoy
from nsight_core.judge.regimes import (
    ConfigRegimes,
    Nominal,
    Regime,
    RegimeCheck,
    RegimePlan,
    nominal_of,
)
from nsight_core.judge.regimes import applies as regimes_apply
from nsight_core.judge.verdict import (
    Tally,
    TrivialBound,
    judge_output,
    trivial_bound,
    type_mismatch,
)
from nsight_core.plan.config import NCU_ENV, EngineConfig
from nsight_core.processes.handover import Handover
from nsight_core.processes.launch import (
    CallTimedOut,
    Channel,
    ContestantGone,
    ContestantProcess,
    Launched,
)
from nsight_core.processes.sandbox import (
    age_of_process,
)
from nsight_core.processes.sandbox.env import inherited, take_inherited
from nsight_core.processes.seat import Seat
from nsight_core.protocol import (
    EVENTS_FILE,
    JOB_FILE,
    READY_FILE,
    RELEASE_FD_ENV,
    STANDBY_FILE,
    CallMsg,
    CheckEvent,
    ContestantJob,
    ContestantMsg,
    DoneEvent,
    EndEvent,
    ExitMsg,
    FailureEvent,
    FloorEvent,
    GpuStateEvent,
    HelloMsg,
    JobSpec,
    LaunchSpec,
    LoadMsg,
    Phase,
    PhaseEvent,
    ProgressEvent,
    RangeEvent,
    ReplyMsg,
    RunKey,
    SampleEvent,
    SlotSpec,
    SuspectEvent,
)
from nsight_core.request import ProfileRequest, named_files, parse_callable_spec
from nsight_core.rows.diagnose import nbytes_of
from nsight_core.runtime.check import clone_args, inputs_differ, same_result
from nsight_core.runtime.early_cuda import EarlyCuda
from nsight_core.runtime.loader import load_callable
from nsight_core.runtime.process import (
    FRAMEWORKS,
    PRESTART_FRAMEWORKS,
    EventWriter,
    failure_event,
    init_cuda,
    preload_frameworks,
    seed_all,
)
from nsight_core.settings import JobSettings

_REPLY = TypeAdapter[ContestantMsg](ContestantMsg)

START_TIMEOUT_S = 120.0
"""How long the contestant may take to start, import and say hello (ncu start-up included)."""

Inputs = tuple[tuple[Any, ...], dict[str, Any]]


HOST_S_KEYS = 12
"""The most keys of a contestant's start-up account kept per hello: a contestant with
candidate code in it could send any number."""


@dataclass
class _ConfigState:
    """One config's calls so far: verdicts, failures, and timed events held back until the
    candidate has passed every check of the config."""

    cid: int
    config: dict[str, Any]
    anns: list[str]
    alive: set[str] = field(default_factory=set)
    tallies: dict[str, Tally] = field(default_factory=dict)
    errors: dict[str, FailureEvent] = field(default_factory=dict)
    pending: dict[str, list[RangeEvent | SampleEvent | FailureEvent | GpuStateEvent]] = field(
        default_factory=dict
    )
    bound: TrivialBound | None = None
    bound_known: bool = False
    probes: dict[str, ProbePlan] = field(default_factory=dict)
    """Per annotation, its repeats and decoys (`_probe_plan`, judge/probes.py)."""
    draw: Inputs | None = None
    """A fresh draw of the config's inputs that decoys take their changed values from."""
    regimes: ConfigRegimes | None = None
    """The candidates' calls on inputs beyond the nominal regime (judge/regimes.py)."""
    after: dict[str, list[tuple[float | None, float | None]]] = field(default_factory=dict)
    """Per annotation, each timed call's (time, work after its window), for `late_work`."""
    after_parts: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    """Per annotation, each timed call's work after its window by where it ran (to word the
    Reason), where its timer reported it."""

    def __post_init__(self) -> None:
        self.alive = set(self.anns)
        self.tallies = {a: Tally() for a in self.anns}
        self.pending = {a: [] for a in self.anns}


class Judge:
    """One job's judge, given a `Seat` whose contestant was started before the job."""

    def __init__(
        self,
        job: JobSpec,
        request: ProfileRequest,
        job_dir: Path,
        seat: Seat,
        *,
        gpu: GpuSampler | None = None,
    ) -> None:
        self.job = job
        self.req = request
        self.job_dir = job_dir
        self.seat = seat
        self.events = EventWriter(job_dir / EVENTS_FILE)
        self.backend: Backend = seat.backend
        assert job.settings is not None  # _read_job refused a job without them
        self.settings = JobSettings.from_wire(job.settings)
        self._rng = random.Random(secrets.randbits(64))
        self._tools = BoundTools(self._rng)
        """Bound before any user code is imported here (guard.py)."""
        self._private = seat.private
        self.arena = seat.arena
        self.phase_seconds: dict[str, float] = {}
        self.judge_s = 0.0
        self.ref: Callable[..., Any] | None = None
        self.maker: Callable[..., Any] | None = None
        self.loaded: list[str] = []
        self.device: str | None = None
        self._proc: ContestantProcess = seat.proc
        self._chan: Channel = seat.chan
        self._wrapped: Wrapped = seat.wrapped
        self._suspects: set[str] = set()
        self.confined = False
        self.notes: list[str] = []
        self.current: tuple[str, int | None, int | None] = ("<contestant>", None, None)
        self._bounds: dict[int, TrivialBound | None] = {}
        """Per config, the trivial-answer bound of its first expected output (both passes)."""
        self._nominals: dict[int, Nominal] = {}
        """Per config, its first expected output's magnitudes, for the regimes' tolerances."""
        self._asked: dict[int, Discrimination] = {}
        self._blind: dict[int, str] = {}
        """Per config, whether its check can tell work from no work (discrimination.py),
        asked on fresh expected outputs in both passes; the reason where it cannot."""
        self._issued: list[IssuedCall] = []
        """Every call sent, in order, with its nonce: read with an ncu report (ranges.py)."""
        self._primed = False
        """The contestant's first hello said it ran the prime: its report's first result."""
        self._gpu = gpu or GpuSampler.for_backend(self.backend.evidence)
        """NVML readings around timed calls (gpu_state.py), opened before the job if given."""
        self._limit = CallLimit(seat.deadline)
        self._in_flight = InFlight(job_dir)
        self.call_limit_s = 0.0
        self.call_limit_why = ""
        """The limit of the candidate call in flight, and how it was chosen (call_limit.py)."""
        self._lost: FailureEvent | None = None
        """The call in flight when the contestant died: its class comes from how it ended."""
        self._hung = False
        """The contestant was ended by the judge: a candidate's call outlived its limit."""

    # -- start -----------------------------------------------------------------------------
    def send_job(self) -> None:
        """Arm the job's time limit and tell the waiting contestant what to import."""
        self.seat.arm(max(self.job.time_limit_s, 1.0))
        source = ref_source = None
        if self.job.source_file:
            source = self._private / "inline_source.py"
            shutil.copyfile(self.job.source_file, source)
        if self.job.reference_source_file:
            ref_source = self._private / "inline_reference.py"
            shutil.copyfile(self.job.reference_source_file, ref_source)
        cjob = ContestantJob(
            annotations=self.req.annotations,
            workdir=self.job.workdir,
            source_file=str(source) if source else None,
            reference_source_file=str(ref_source) if ref_source else None,
            child_timer=self.backend.child_timer,
            check_mutation=self.req.check.enabled and self.req.check.check_mutation,
            check_aliasing=self.req.check.enabled and self.req.check.check_aliasing,
            confine=self.job.confine,
            read_dirs=[str(self._private), *self._named_dirs()],
            write_dirs=[str(self._private), str(self.arena.directory)],
        )
        t0 = time.monotonic()
        self.seat.wait_ready(START_TIMEOUT_S)
        if not self.seat.prestarted:  # which of the two processes a cold job waited for
            self.phase_seconds["judge.waited"] = round(time.monotonic() - t0, 4)
        self._chan.send(cjob.model_dump_json().encode())

    def _named_dirs(self) -> list[str]:
        """The folders of the files the request names, wherever they are (their siblings
        import), and nothing else: the workdir alone would leave an agent's absolute paths
        elsewhere unreadable. A folder that holds job data (this job's private folder and
        slots, and beside them other jobs'; the result store) is never opened whole: only
        the named file in it is (a candidate at /tmp/v1.py must not read /tmp)."""
        held = [p.resolve() for p in (self._private, self.arena.directory, self.job_dir)]
        reads = set()
        for f in named_files(self.req, Path(self.job.workdir)):
            folder = f.path.parent
            broad = any(folder == h or folder in h.parents for h in held)
            reads.add(str(f.path if broad else folder))
        return sorted(reads)

    def load_trusted(self) -> JobExit | None:
        """Import the reference and the input maker, never a candidate's module: the guard
        refuses those imports for the judge's life, and what the trusted code rebinds of the
        judge's own tools fails the job (guard.py)."""
        src = self.job.reference_source_file or self.job.source_file
        source = Path(src) if src else None
        workdir = Path(self.job.workdir)
        self._guard_candidates(workdir)
        for role, spec in (("reference", self.req.reference), ("inputs", self.req.inputs)):
            try:
                fn = load_callable(spec, workdir=workdir, source_file=source)
            except Exception as exc:
                ev = failure_event(spec, "import", exc)
                self.events.emit(ev)
                if ev.error_class == ErrorClass.COMPILE_ERROR:
                    return JobExit.COMPILE_FAILED
                return JobExit.IMPORT_FAILED
            if role == "reference":
                self.ref = fn
            else:
                self.maker = fn
        return self.tools_intact("importing the reference and the input maker")

    def _guard_candidates(self, workdir: Path) -> None:
        files = [f.path for f in named_files(self.req, workdir) if f.role == "candidate"]
        modules = []
        for spec in self.req.candidates:
            file, module, _ = parse_callable_spec(spec)
            if file is None and module is None and self.job.source_file:
                files.append(Path(self.job.source_file))
            elif module is not None:
                modules.append(module)
        CandidateImportGuard(files, modules).install()

    def tools_intact(self, when: str) -> JobExit | None:
        """None while the judge's checking and drawing tools are those bound at its start;
        else the job fails, naming what changed: no verdict of it could be trusted."""
        changed = self._tools.changed()
        if not changed:
            return None
        self.events.emit(
            FailureEvent(
                annotation=self.req.reference,
                phase="import",
                error_class=ErrorClass.RUNTIME_ERROR,
                message=(
                    f"{when} rebound the judge's own {', '.join(changed[:5])}: no verdict of "
                    "this job could be trusted, so none is given"
                ),
                traceback="",
            )
        )
        return JobExit.REFERENCE_FAILED

    def hello(self) -> None:
        """The contestant's start: it has imported the reference, and nothing else."""
        self._primed = self._take_hello().primed

    def load_candidates(self) -> None:
        """After the reference's last call: the contestant imports the candidates."""
        # A crash while importing them is no call of the reference's.
        self.current = ("<contestant>", None, None)
        self._chan.send(LoadMsg().model_dump_json().encode())
        self._take_hello()

    def _take_hello(self) -> HelloMsg:
        msg = self._read()
        if not isinstance(msg, HelloMsg):
            raise ValueError("the contestant answered with a call reply where a hello was due")
        for f in msg.failures:
            self.events.emit(f)
        self.loaded += [a for a in self.req.annotations if a in msg.loaded and a not in self.loaded]
        for what in msg.integrity:
            self._suspect(None, f"candidate code rebound {what}", what)
        for what in msg.shadowed:
            self._suspect(None, f"{what}; the harness imported the real one first", "")
        self.confined = msg.confined
        self.notes += [n for n in msg.notes if n not in self.notes]
        self._add_host_s(msg.host_s)
        return msg

    def _add_host_s(self, host_s: dict[str, float]) -> None:
        """The contestant's own account of its time, kept apart ("contestant." keys) for the
        benchmarks: it comes from candidate code's process, so no verdict reads it."""
        for k, v in list(host_s.items())[:HOST_S_KEYS]:
            if isinstance(v, float) and 0.0 <= v < 1e6:
                key = f"contestant.{k[:32]}"
                self.phase_seconds[key] = round(self.phase_seconds.get(key, 0.0) + v, 4)

    def _suspect(self, annotation: str | None, reason: str, what: str) -> None:
        if reason in self._suspects:
            return
        self._suspects.add(reason)
        # The backend's timer says whether the rebinding touches its numbers (a patched
        # host clock leaves cupti's and ncu's standing), and those rows only.
        affects = tampering_affects(self.backend, what) if what else "all"
        if affects == "none":
            self.notes.append(f"{reason}: not on this backend's timing path; its rows stand")
            return
        in_process = affects == "timer" and self.backend.evidence == "in_process"
        targets: list[str | None] = [annotation]
        if annotation is None and what and len(self.loaded) > 1:
            # Seen once candidates exist: every call of the reference was made before.
            targets = [a for a in self.loaded if a != self.req.reference]
        for target in targets:
            self.events.emit(
                SuspectEvent(annotation=target, reason=reason, in_process_only=in_process)
            )

    def _name(self, annotation: str, notes: list[str]) -> None:
        """What a call left set that the harness undid: named in its rows, no verdict."""
        for note in notes[:4]:
            if note not in self._suspects:  # once per job
                self._suspects.add(note)
                self.events.emit(SuspectEvent(annotation=annotation, reason=note, verdict=False))

    def _read(self, deadline: float | None = None) -> HelloMsg | ReplyMsg:
        assert self._chan is not None and self._proc is not None
        line = self._chan.recv_line(self._proc.alive, deadline)
        return _REPLY.validate_json(line)

    # -- one call ----------------------------------------------------------------------------
    def make_inputs(self, config: dict[str, Any]) -> Inputs:
        assert self.maker is not None
        seed_all(self._rng.getrandbits(63))
        made = self.maker(**config)
        if isinstance(made, dict):
            return (), dict(made)
        if isinstance(made, tuple):
            return made, {}
        return (made,), {}

    def call(
        self,
        ann: str,
        cid: int,
        run: int | None,
        inputs: Inputs,
        expected: Any,
    ) -> tuple[ReplyMsg, Any]:
        """Send one call; the reply and the rebuilt output (None when it failed)."""
        assert self._chan is not None and self._proc is not None
        self.current = (ann, cid, run)
        t0 = time.perf_counter()
        new: list[SlotSpec] = []
        mask = secrets.token_bytes(8) if self.backend.masks_inputs else None
        node = self.arena.encode_inputs(inputs, f"c{cid}", new, mask)
        check = self.req.check.enabled
        out_slots = self.arena.output_slots(expected, f"c{cid}", new) if check else []
        sync_all()
        nonce = secrets.token_hex(8)
        self._issued.append(IssuedCall(nonce, ann, cid, run))
        msg = CallMsg(
            nonce=nonce,
            annotation=ann,
            config_id=cid,
            run=run,
            new_slots=new,
            inputs=node,
            out_slots=out_slots,
            want_output=check,
            mask=mask.hex() if mask is not None else None,
        )
        self.judge_s += time.perf_counter() - t0
        if run is not None:
            self._gpu.start(RunKey(ann, cid, run), self.device)
        deadline = self._deadline_for(ann)
        self._in_flight.mark(ann, cid, run)
        self._chan.send(msg.model_dump_json().encode())
        t_sent = time.monotonic()
        while True:
            reply = self._read(deadline)
            if isinstance(reply, ReplyMsg) and reply.nonce == nonce:
                break
            self._suspect(
                ann,
                "the contestant sent a message nobody asked for (a forged or replayed "
                "report); in-process numbers of this job are not trustworthy",
                "nsight_core.protocol",
            )
        rt = round(time.monotonic() - t_sent, 4)
        if ann == self.req.reference:
            self._limit.note_reference(rt)
        self._gpu.stop()
        self.phase_seconds["roundtrips"] = round(self.phase_seconds.get("roundtrips", 0.0) + rt, 4)
        self._add_host_s(reply.host_s)
        if reply.device:
            self.device = reply.device
        for what in reply.integrity:
            self._suspect(None, f"candidate code rebound {what} (seen after {ann!r})", what)
        if reply.outside:
            self._suspect(
                ann,
                "another thread launched kernels between timed calls "
                f"({', '.join(reply.outside[:3])}): work outside any call's range, a thread or "
                "stream left running, which also lands in calls' windows; its in-process "
                "times are not this candidate's alone",
                "",
            )
        self._name(ann, reply.notes)
        if not reply.ok or reply.output is None:
            return reply, None
        t1 = time.perf_counter()
        try:
            actual = self.arena.decode_output(reply.output, set(out_slots))
        except ValueError as exc:
            actual = _Undecodable(str(exc))
        if check and self.req.check.check_mutation:
            # Decided here, from what the input slots hold after the call, not from the
            # contestant's report (which candidate code in its process could rebind).
            seen = inputs_differ(inputs, self.arena.read_inputs(node, inputs))
            if seen:
                mine = [f"mutated input {name} (seen in the judge's slot)" for name in seen]
                reply = reply.model_copy(update={"reasons": [*reply.reasons, *mine]})
        sync_all()
        self.judge_s += time.perf_counter() - t1
        return reply, actual

    def _deadline_for(self, ann: str) -> float | None:
        """When ``ann``'s call must have answered: a candidate's own limit (call_limit.py);
        None for the trusted reference, which has the job's limit alone."""
        if ann == self.req.reference:
            return None
        self.call_limit_s, self.call_limit_why = self._limit.for_candidate()
        return time.monotonic() + self.call_limit_s

    # -- one config ----------------------------------------------------------------------
    def run_config(
        self, cid: int, config: dict[str, Any], anns: list[str], done: list[int], total: int
    ) -> bool:
        """All calls of ``anns`` on one config; False when the reference itself (the judge's
        run of it, or the input maker) failed on it."""
        st = _ConfigState(cid, config, [a for a in anns if a in self.loaded])
        st.bound_known, st.bound = cid in self._bounds, self._bounds.get(cid)
        untimed = self.untimed_calls
        try:
            with self.phase("check"):
                for _ in range(untimed):
                    for ann in st.anns:
                        if ann in st.alive:
                            self._one(st, ann, None)
                        done[0] += 1
                    self.events.emit(
                        ProgressEvent(phase="check", config_id=cid, done=done[0], total=total)
                    )
            with self.phase("profile"):
                for run in range(self.req.runs):
                    for ann in [a for a in st.anns if a in st.alive]:
                        self._one(st, ann, run)
                        done[0] += 1
                        self.events.emit(
                            ProgressEvent(
                                phase="profile",
                                annotation=ann,
                                config_id=cid,
                                run=run,
                                done=done[0],
                                total=total,
                            )
                        )
            self._after_timed_runs(st)
        except _ReferenceFailed as exc:
            self.events.emit(exc.failure)
            return False
        finally:
            self._report_config(st)
        return True

    def _after_timed_runs(self, st: _ConfigState) -> None:
        """The untimed extras and regime calls due after every annotation's last timed run."""
        regimes = st.regimes.plans if st.regimes is not None else {}
        if not any(p.post for p in st.probes.values()) and not any(
            p.post for p in regimes.values()
        ):
            return
        with self.phase("check"):
            for ann, plan in st.probes.items():
                for extra in list(plan.post):
                    self._extra(st, ann, plan, extra)
            for ann, due in regimes.items():
                for regime in due.post:
                    self._regime(st, ann, regime)

    @property
    def untimed_calls(self) -> int:
        """Calls per annotation and config before the timed runs: the warm-up, plus only as
        many extra checked calls as the timed runs leave short of `check.seeds` (every timed
        output is checked too). Each untimed call is a round trip that ncu intercepts, and
        they were a tenth of the softmax bench's wall time."""
        spec = self.req.check
        short = spec.seeds - self.req.runs if spec.enabled else 0
        return max(self.req.warmup, short, 1)

    def _expect(self, st: _ConfigState, inputs: Inputs) -> Any:
        """The reference's output on a copy of fresh ``inputs`` (None when checks are off);
        the config's first also sets its trivial-answer bound and floor, and each feeds
        the question whether the check can tell work from no work (discrimination.py)."""
        spec = self.req.check
        if not spec.enabled:
            return None
        t0 = time.perf_counter()
        out = self._reference_output(inputs)
        if not st.bound_known:
            st.bound = self._bounds[st.cid] = trivial_bound(out, inputs, spec.atol, spec.rtol)
            st.bound_known = True
            if spec.regimes:
                self._nominals[st.cid] = nominal_of(out)
            # The physical floor: bytes in and out, once per config.
            self.events.emit(
                FloorEvent(config_id=st.cid, bytes_in=nbytes_of(inputs), bytes_out=nbytes_of(out))
            )
        asked = self._asked.setdefault(
            st.cid, Discrimination(st.cid, min(BLIND_PAIRS, self.untimed_calls + self.req.runs - 1))
        )
        blind = asked.feed(out, inputs, atol=spec.atol, rtol=spec.rtol, bound=st.bound)
        if blind is not None:
            self._blind[st.cid] = blind  # every passed check on the config carries it
        self.judge_s += time.perf_counter() - t0
        return out

    def _reference_output(self, inputs: Inputs) -> Any:
        assert self.ref is not None
        args, kwargs = clone_args(inputs)
        out = self.ref(*args, **kwargs)
        sync_all()
        return out

    def _one(self, st: _ConfigState, ann: str, run: int | None) -> None:
        """One fresh call of ``ann`` (timed when ``run`` is given), then the untimed
        repeats and decoys its plan puts right after it (judge/probes.py), and the regime
        calls (judge/regimes.py)."""
        plan = self._probe_plan(st, ann)
        regimes = self._regime_plan(st, ann)
        try:
            inputs = self.make_inputs(st.config)
            expected = self._expect(st, inputs)
        except Exception as exc:
            failure = failure_event(self.req.reference, "check", exc, config_id=st.cid)
            raise _ReferenceFailed(failure) from exc
        actual = self._checked_call(st, ann, run, inputs, expected)
        if plan is not None:
            plan.fresh += 1
            if plan.fresh in plan.sources and ann in st.alive:
                plan.kept[plan.fresh] = (inputs, actual)
            for extra in list(plan.after.get(plan.fresh, [])):
                self._extra(st, ann, plan, extra)
        if regimes is not None:
            for regime in regimes.next_fresh():
                self._regime(st, ann, regime)

    def _extra(self, st: _ConfigState, ann: str, plan: ProbePlan, extra: Extra) -> None:
        """One untimed repeat (the earlier output, which passed, stands in for the expected
        one, and must come again bit for bit) or decoy of an earlier fresh call."""
        kept = plan.kept.get(extra.source)
        plan.done_with(extra)
        if kept is None or ann not in st.alive or not st.tallies[ann].passed:
            return
        inputs, earlier = kept
        if not extra.decoy:
            self._checked_call(st, ann, None, inputs, earlier, earlier)
            return
        spec = self.req.check
        t0 = time.perf_counter()
        try:
            if st.draw is None:
                st.draw = self.make_inputs(st.config)
            made = make_decoy(
                inputs,
                earlier,
                draw=st.draw,
                expect=self._reference_output,
                replay_passes=lambda e, o: replay_passes(
                    e, o, atol=spec.atol, rtol=spec.rtol, bound=st.bound
                ),
                rng=self._rng,
                # Where any earlier answer passes (a blind check), changing more is no use.
                attempts=1 if st.cid in self._blind else DECOY_ATTEMPTS,
            )
            self.judge_s += time.perf_counter() - t0
            if made is None:  # no decoy of these inputs: a fresh call in its place
                fresh = self.make_inputs(st.config)
                made = fresh, self._expect(st, fresh)
        except Exception as exc:
            failure = failure_event(self.req.reference, "check", exc, config_id=st.cid)
            raise _ReferenceFailed(failure) from exc
        self._checked_call(st, ann, None, *made)

    def _checked_call(
        self,
        st: _ConfigState,
        ann: str,
        run: int | None,
        inputs: Inputs,
        expected: Any,
        same_as: Any = None,
        regime: RegimeCheck | None = None,
    ) -> Any:
        """The call, its verdict (and, for a repeat, ``same_as``: the output it must give
        again; for a regime call, ``regime``: its tolerance, and the name its failures
        carry), its timed events; its output, or None when it failed."""
        reply, actual = self.call(ann, st.cid, run, inputs, expected)
        if not reply.ok:
            failure = reply.failure or FailureEvent(
                annotation=ann,
                phase="profile" if run is not None else "check",
                error_class=ErrorClass.RUNTIME_ERROR,
                message="the call failed without a report",
            )
            if run is None:
                named = regime.label(failure.message) if regime is not None else failure.message
                st.errors[ann] = failure.model_copy(
                    update={"phase": "check", "config_id": st.cid, "message": named}
                )
                st.alive.discard(ann)
            else:
                st.pending[ann] += [
                    RangeEvent(annotation=ann, config_id=st.cid, run=run, ok=False),
                    failure,
                ]
            return None
        if self.req.check.enabled:
            tally = st.tallies[ann]
            if regime is None:
                self._judge(tally, expected, reply, actual, st.bound, inputs)
            else:
                sub = Tally()
                self._judge(sub, expected, reply, actual, st.bound, inputs, by=regime.judge)
                regime.fold(tally, sub)
            if same_as is not None and tally.passed:
                t0 = time.perf_counter()
                if not same_result(same_as, actual).passed:
                    tally.fail("nondeterministic: two calls on the same inputs differ")
                self.judge_s += time.perf_counter() - t0
            if not tally.passed:
                st.alive.discard(ann)
                return None
        if run is not None:
            st.pending[ann].append(RangeEvent(annotation=ann, config_id=st.cid, run=run, ok=True))
            key = RunKey(ann, st.cid, run)
            st.pending[ann] += self.backend.call_samples(
                key, reply.ns, reply.kernels, self.settings, latency_ns=reply.latency_ns
            )
            st.after.setdefault(ann, []).append((reply.ns, reply.after_ns))
            if reply.after_parts is not None:
                st.after_parts.setdefault(ann, []).append(reply.after_parts)
            st.pending[ann] += self._gpu.take(key)
        return actual

    def _regime_plan(self, st: _ConfigState, ann: str) -> RegimePlan | None:
        """``ann``'s regime calls on this config, drawn on its first call (regimes.py); None
        for the reference, where they are off, on a config whose check cannot discriminate
        (its verdict says so already) and where a GPU MODE task's check judges."""
        spec = self.req.check
        nominal = self._nominals.get(st.cid)
        if (
            not (spec.enabled and spec.regimes)
            or ann == self.req.reference
            or nominal is None
            or st.cid in self._blind
            or not regimes_apply()
        ):
            return None
        if st.regimes is None:
            st.regimes = ConfigRegimes(st.cid, nominal)
        return st.regimes.plan(ann, self._rng, self.untimed_calls)

    def _regime(self, st: _ConfigState, ann: str, regime: Regime) -> None:
        """One untimed call of ``ann`` on a fresh draw of the inputs in ``regime``, checked
        against the reference's output on them; none where the regime changes no input or
        the reference does not allow it (then the job's notes say so, once)."""
        rs = st.regimes
        if rs is None or ann not in st.alive or not st.tallies[ann].passed:
            return
        if regime.name in rs.refused:
            return
        t0 = time.perf_counter()
        try:
            if st.draw is None:
                st.draw = self.make_inputs(st.config)
            made = rs.inputs(regime, self.make_inputs(st.config), st.draw, self._rng)
        except Exception as exc:
            failure = failure_event(self.req.reference, "check", exc, config_id=st.cid)
            raise _ReferenceFailed(failure) from exc
        expected, why = None, None
        if made is not None:
            expected, why = rs.expected(regime, made.inputs, self._reference_output)
        self.judge_s += time.perf_counter() - t0
        if why is not None:
            self.notes.append(why)
        if made is None or why is not None:
            return
        self._checked_call(st, ann, None, made.inputs, expected, regime=rs.check(regime, made))

    def _probe_plan(self, st: _ConfigState, ann: str) -> ProbePlan | None:
        """``ann``'s repeats and decoys on this config, drawn from the judge's secret
        generator on its first call (`draw_plan`); None when determinism is not checked.
        The untimed calls grow by them wherever they fall, so their number says nothing."""
        spec = self.req.check
        if not (spec.enabled and spec.check_determinism):
            return None
        plan = st.probes.get(ann)
        if plan is None:
            plan = st.probes[ann] = draw_plan(self._rng, self.untimed_calls, self.req.runs)
        return plan

    def _judge(
        self,
        tally: Tally,
        expected: Any,
        reply: ReplyMsg,
        actual: Any,
        bound: TrivialBound | None,
        inputs: Inputs,
        by: Callable[..., None] = judge_output,
    ) -> None:
        """``by``: the comparison of values (`judge_output`; a regime's own, regimes.py)."""
        for reason in reply.reasons:
            tally.fail(reason)
        assert reply.output is not None
        mismatch = type_mismatch(expected, reply.output)
        if mismatch is not None:
            tally.calls += 1
            tally.fail(f"output mismatch: {mismatch}")
            return
        if isinstance(actual, _Undecodable):
            tally.calls += 1
            tally.fail(f"output mismatch: {actual.why}")
            return
        spec = self.req.check
        by(tally, expected, actual, atol=spec.atol, rtol=spec.rtol, bound=bound, inputs=inputs)

    def _report_config(self, st: _ConfigState) -> None:
        check = self.req.check.enabled
        for ann in st.anns:
            t, err = st.tallies[ann], st.errors.get(ann)
            passed = err is None and t.passed
            if ann == self.req.reference:
                if err is not None:
                    self.events.emit(err)
                elif check and not t.passed:
                    self._suspect(
                        None,
                        "the reference, called in the contestant's process, disagreed with "
                        f"itself run by the judge ({'; '.join(t.reasons)}): candidate code "
                        "changed what the reference computes",
                        "",
                    )
            elif check or err is not None:
                if err is not None:
                    self.events.emit(err)
                self.events.emit(self._check_event(st.cid, ann, t, err))
            if passed or ann == self.req.reference:
                # The backend says whether work after the windows makes its times short.
                late = self.backend.late_work(
                    st.cid, st.after.get(ann, []), st.after_parts.get(ann, [])
                )
                if late is not None:
                    self._suspect(ann, late, "")
                for ev in st.pending[ann]:
                    self.events.emit(ev)

    def _check_event(self, cid: int, ann: str, t: Tally, err: FailureEvent | None) -> CheckEvent:
        passed = err is None and t.passed
        reasons = sorted(set(t.reasons))
        if passed:
            error_class, message = None, None
            reasons = [self._blind[cid]] if cid in self._blind else reasons
        elif err is not None:
            error_class, message = err.error_class, err.message
        else:
            error_class, message = ErrorClass.INCORRECT, "; ".join(reasons)
        return CheckEvent(
            annotation=ann,
            config_id=cid,
            passed=passed,
            seeds=t.calls,
            max_abs_error=t.max_abs if err is None else None,
            max_rel_error=t.max_rel if err is None else None,
            mismatch_count=t.mismatches if err is None else None,
            first_bad_index=t.first_bad_index,
            reasons=reasons,
            error_class=error_class,
            message=message,
        )

    # -- the whole job ---------------------------------------------------------------------
    @contextlib.contextmanager
    def phase(self, name: Phase) -> Any:
        t0 = time.monotonic()
        self.events.emit(PhaseEvent(phase=name, state="start", t=t0))
        try:
            yield
        finally:
            t1 = time.monotonic()
            self.phase_seconds[name] = self.phase_seconds.get(name, 0.0) + (t1 - t0)
            self.events.emit(PhaseEvent(phase=name, state="end", t=t1))

    def run(self, spawn_s: float | None = None) -> int:
        # Where a job's wall time goes, for the benchmarks: this process's start until the
        # contestant was spawned ("spawn"; 0 for a pre-started judge, the handover until
        # then for an idle one), then (in "import")
        # until its hello, and its exit at the end.
        if spawn_s is not None:
            self.phase_seconds["spawn"] = round(spawn_s, 4)
        try:
            self.send_job()
            if spawn_s:  # a cold job: its contestant's launch is on the job's path
                self._note_launch()
            return self._run()
        except CallTimedOut:
            # A candidate's call outlived its own limit: it alone is lost. The contestant is
            # ended (its process group) and the pipeline runs the others again without it.
            ann, cid, run = self.current
            self._hung = True
            self._proc.cancel.set()
            self.events.emit(
                FailureEvent(
                    annotation=ann,
                    config_id=cid,
                    run=run,
                    phase="profile" if run is not None else "check",
                    error_class=ErrorClass.TIMEOUT,
                    message=f"its call did not return within {self.call_limit_s:.1f} s, "
                    f"the per-call limit ({self.call_limit_why}); its process was ended",
                    hint="fix the hang (a loop that never ends, a wait on something that never "
                    "comes); a call that is only slow gets more time with a larger time_limit_s",
                )
            )
            return int(JobExit.OK)
        except (ContestantGone, TimeoutError) as exc:
            # The contestant died (a crash, its time limit, its memory limit, a kill): the
            # call in flight is named once its process's end says why (`_finish`).
            ann, cid, run = self.current
            self._lost = FailureEvent(
                annotation=ann,
                config_id=cid,
                run=run,
                phase="profile" if run is not None else "check",
                error_class=ErrorClass.CRASHED,
                message=str(exc),
            )
            return int(JobExit.OK)
        finally:
            self._finish()

    def _note_launch(self) -> None:
        """``launch``: the contestant's spawn until its own interpreter started (under ncu,
        ncu's start before it runs its target), so a cold job's phases cover its start; the
        contestant's own ``process`` starts there. Nothing where /proc does not say."""
        age = age_of_process(self._chan.peer_pid) if self._chan.peer_pid else None
        if age is not None:
            since_spawn = time.monotonic() - self.seat.started
            self.phase_seconds["launch"] = round(max(0.0, since_spawn - age), 4)

    def _run(self) -> int:
        with self.phase("import"):
            code = self.load_trusted()
            if code is not None:
                return int(code)
            self.hello()
        configs = self.req.configs
        total = len(configs) * (self.untimed_calls + self.req.runs) * len(self.req.annotations)
        done = [0]
        # The reference first, every config, while it is the only code in the contestant;
        # then the candidates. Nothing a candidate leaves running can reach its ranges.
        ref_ok = [
            self.run_config(cid, config, [self.req.reference], done, total)
            for cid, config in enumerate(configs)
        ]
        if configs and not any(ref_ok):
            return int(JobExit.REFERENCE_FAILED)
        broken = self.tools_intact("calling the reference and the input maker")
        if broken is not None:
            return int(broken)
        with self.phase("import"):
            self.load_candidates()
        candidates = [a for a in self.req.annotations[1:] if a in self.loaded]
        for cid, config in enumerate(configs):
            if ref_ok[cid] and candidates:
                self.run_config(cid, config, candidates, done, total)
        return int(JobExit.OK)

    def _finish(self) -> None:
        with contextlib.suppress(OSError, AssertionError, ContestantGone):
            self._chan.send(ExitMsg().model_dump_json().encode())
        t0 = time.monotonic()
        outcome = self._proc.wait(timeout=30.0)
        self.phase_seconds["exit"] = round(time.monotonic() - t0, 4)
        self.seat.close()
        self._wrapped = self.seat.move_artifacts(self.job_dir)
        with contextlib.suppress(OSError):
            write_issued(self.job_dir / CALLS_FILE, self._issued, primed=self._primed)
        if self._lost is not None:
            self.events.emit(lost_call(self._lost, outcome))
        if outcome is not None:
            err = self.backend.classify_end(outcome, self._wrapped, self.settings)
            if self._hung:  # the judge ended it: the hung call's failure says why
                err = None
                outcome = ended_by_judge(outcome)
            cls = err.error_class if err else outcome.error_class
            self.events.emit(
                EndEvent(
                    error_class=cls,
                    message=err.message if err else outcome.message,
                    hint=err.hint if err else outcome.hint,
                    exit_code=outcome.exit_code,
                    signal=outcome.signal_name,
                    command=self._wrapped.argv,
                    tool_version=self._wrapped.tool_version,
                    wall_s=round(outcome.wall_s, 3),
                )
            )
        self._in_flight.close()
        self.phase_seconds["nvml"] = round(self._gpu.spent_s, 4)
        self.phase_seconds["judge"] = round(self.judge_s + self._gpu.spent_s, 4)
        self.events.emit(
            DoneEvent(
                phase_seconds=self.phase_seconds,
                device=self.device,
                confined=self.confined,
                notes=[*self.notes, *self.arena.notes, *self._gpu.notes()],
            )
        )
        self.events.close()


@dataclass(frozen=True)
class _Undecodable:
    why: str


class _ReferenceFailed(Exception):
    def __init__(self, failure: FailureEvent) -> None:
        super().__init__(failure.message)
        self.failure = failure


def warm_checks() -> None:
    """The judge runs its own checking path once on small CUDA arrays while its contestant
    starts: CUDA loads kernel modules on first use, and the job would pay for each (the
    random fill, clones, the trivial-answer bound and the comparison) on its critical path.
    A failure here changes nothing: the job's own calls load what they need."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    with contextlib.suppress(Exception):
        if torch.cuda.is_available():
            check_path_once("cuda")
            torch.cuda.synchronize()


def check_path_once(device: str) -> Tally:
    """The judge's comparison of one output with itself, per floating dtype, on ``device``."""
    import torch  # lazy: only where torch is installed (warm_checks looked)

    tally = Tally()
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = torch.randn(4, 64, device=device).to(dtype)
        inputs: Inputs = ((x,), {})
        y = clone_args(inputs)[0][0]
        bound = trivial_bound(x, inputs, None, None)
        judge_output(tally, x, y, atol=None, rtol=None, bound=bound)
        if not same_result(x, y).passed:
            tally.fail("warm-up: an output differs from its clone")
    return tally


def _read_job(job_dir: Path, spec: LaunchSpec) -> JobSpec | str:
    """The request job in ``job_dir`` for a judge launched with ``spec``; else why not."""
    try:
        job = JobSpec.model_validate_json((job_dir / JOB_FILE).read_text())
    except (OSError, ValidationError) as exc:
        return f"bad job file: {exc}"
    if job.request is None or job.launch is None or job.settings is None:
        return "not a request job (no request, launch settings or job settings)"
    if job.launch != spec:
        return "the job's settings differ from this judge's"
    return job


def _inherited_tools() -> EngineConfig:
    """What a judge wraps its contestant with when its server's plan could not be read:
    the ncu and PATH its server handed down (the allowlist, sandbox/env.py), the judge's
    only view of its server's settings."""
    ncu = (inherited(NCU_ENV) or "").strip()
    return EngineConfig(ncu=ncu, path=inherited("PATH") or os.defpath)


def standby_main(
    home: Path, handover: Handover, launched: Launched | None, early: EarlyCuda | None = None
) -> int:
    """A pre-started judge: seat the contestant for HOME's `LaunchSpec`, say so once it is
    up (the ready file, which the pool waits for), then run the job handed over.

    ``launched``: the contestant boot.py started from the server's plan (None: the judge
    makes the command itself); ``early``: the CUDA context boot.py began on a side thread."""
    release_fd = _release_fd()
    spec = _read_spec(home, launched)
    if spec is None:
        return int(JobExit.BAD_JOB)
    seat = Seat(spec, home, _inherited_tools(), prestarted=True, launched=launched)
    preload_frameworks(PRESTART_FRAMEWORKS)
    init_cuda(early)
    warm_checks()
    gpu = GpuSampler.for_backend(seat.backend.evidence)  # NVML's start, off the job's path
    try:
        seat.wait_ready(START_TIMEOUT_S)
    except (ContestantGone, TimeoutError, ValueError) as exc:
        sys.stderr.write(f"nsight_core.judge.core: the standby's contestant did not start: {exc}\n")
        seat.close()
        return int(JobExit.OK)
    (home / READY_FILE).touch()
    idle0 = time.monotonic()
    taken = handover.wait(seat.proc.alive)
    if taken is None:  # the contestant ended while it waited: the pool starts a fresh pair
        seat.close()
        return int(JobExit.OK)
    job = _read_job(taken.job_dir, spec)
    if isinstance(job, str):
        sys.stderr.write(f"nsight_core.judge.core: {job}\n")
        seat.close()
        return int(JobExit.BAD_JOB)
    phases = {"standby_idle": round(time.monotonic() - idle0, 4)}
    return _run_job(job, taken.job_dir, seat, gpu, phases, 0.0, release_fd)


def idle_main(home: Path, handover: Handover, early: EarlyCuda | None = None) -> int:
    """An idle judge (handover.py): start before any request, then run the job handed over,
    whose contestant the handover thread started the moment it came.

    Its start is off the job's path unless the job came during it. Even then it warms its
    checking path, as a cold judge does: the contestant, started at the handover, takes
    longer to start than the warm-up, and every check would otherwise load its kernels."""
    release_fd = _release_fd()
    preload_frameworks(FRAMEWORKS)
    init_cuda(early)
    warm_checks()
    ready = time.monotonic()
    (home / READY_FILE).touch()
    taken = handover.wait()
    assert taken is not None  # no contestant to end before the job: it waits for one
    spec = _read_spec(home, taken.launched)
    if spec is None:
        return int(JobExit.BAD_JOB)
    seat = Seat(spec, home, _inherited_tools(), prestarted=False, launched=taken.launched)
    job = _read_job(taken.job_dir, spec)
    if isinstance(job, str):
        sys.stderr.write(f"nsight_core.judge.core: {job}\n")
        seat.close()
        return int(JobExit.BAD_JOB)
    gpu = GpuSampler.for_backend(seat.backend.evidence)
    # How long it waited ready for the job, or how much of its start was left when it came.
    phases = {
        "judge.idle": round(max(0.0, taken.received - ready), 4),
        "judge.start_left": round(max(0.0, ready - taken.received), 4),
    }
    spawn_s = max(1e-4, seat.started - taken.received)  # the handover until the spawn
    return _run_job(job, taken.job_dir, seat, gpu, phases, spawn_s, release_fd)


def _read_spec(home: Path, launched: Launched | None) -> LaunchSpec | None:
    """HOME's `LaunchSpec`; None (the contestant stopped) when it is missing or bad."""
    try:
        return LaunchSpec.model_validate_json((home / STANDBY_FILE).read_text())
    except (OSError, ValidationError) as exc:
        sys.stderr.write(f"nsight_core.judge.core: bad launch file: {exc}\n")
        if launched is not None:
            launched.proc.cancel.set()
        return None


def _run_job(
    job: JobSpec,
    job_dir: Path,
    seat: Seat,
    gpu: GpuSampler,
    phases: dict[str, float],
    spawn_s: float,
    release_fd: int | None,
) -> int:
    """Judge the job taken on ``seat``; its exit code, told to the pool once every event of
    the job is written."""
    assert job.request is not None
    judge = Judge(job, job.request, job_dir, seat, gpu=gpu)
    judge.phase_seconds.update(phases)
    try:
        code = judge.run(spawn_s)
    except Exception as exc:
        with EventWriter(job_dir / EVENTS_FILE) as events:
            events.emit(failure_event("<judge>", "profile", exc))
        code = int(JobExit.INTERNAL)
    release(release_fd, code)  # last: every event of the job is written and closed
    return code


def _release_fd() -> int | None:
    """The pool's release pipe (pre-started judges only); removed from the environment, so
    nothing this process starts is told of it (nor inherits it: sandbox.py closes it)."""
    raw = take_inherited(RELEASE_FD_ENV)
    try:
        return int(raw) if raw else None
    except ValueError:
        return None


def release(fd: int | None, code: int) -> None:
    """Tell the pool the job's record is complete, with this judge's exit code: the process's
    own end (a CUDA context's teardown) need not delay the result."""
    if fd is None:
        return
    with contextlib.suppress(OSError):
        os.write(fd, f"{code}\n".encode())
        os.close(fd)
