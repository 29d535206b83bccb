"""The judge: makes the inputs, runs the reference, checks every output. Never imports candidates.

Started by judge/boot.py (which starts the contestant, then imports entry.py, which imports
this), before or just as its job exists: the job is handed over on a socket
(standby/pool.py), at once for a cold job, later for a pre-started judge; one path
either way. It

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

The `Judge` here sets the job up (the contestant's job, the trusted imports and their guard)
and ties its parts: calls.py (the round trip with the contestant), config_run.py (one
config's calls and verdicts), account.py (the events and seconds they write); entry.py
starts it.

The judge is one trust boundary: everything in this module runs in the process that may be
trusted with verdicts, and nothing else should import it.
"""

from __future__ import annotations

import contextlib
import random
import secrets
import shutil
import time
from pathlib import Path

from nsight_core.collectors.base import Backend, Wrapped
from nsight_core.collectors.ranges import CALLS_FILE, write_issued
from nsight_core.errors import ErrorClass, JobExit
from nsight_core.judge.account import Account
from nsight_core.judge.call_limit import ended_by_judge, lost_call
from nsight_core.judge.calls import Calls
from nsight_core.judge.config_run import ConfigRunner
from nsight_core.judge.gpu_state import GpuSampler
from nsight_core.judge.guard import BoundTools, CandidateImportGuard
from nsight_core.processes.in_flight import InFlight
from nsight_core.processes.launch import (
    CallTimedOut,
    Channel,
    ContestantGone,
    ContestantProcess,
)
from nsight_core.processes.sandbox import (
    age_of_process,
)
from nsight_core.processes.seat import Seat
from nsight_core.protocol import EVENTS_FILE, DoneEvent, EndEvent, FailureEvent, JobSpec
from nsight_core.request import ProfileRequest
from nsight_core.runtime.loader import load_callable
from nsight_core.runtime.messages import ContestantJob, ExitMsg
from nsight_core.runtime.process import (
    EventWriter,
    failure_event,
)
from nsight_core.settings import JobSettings

START_TIMEOUT_S = 120.0
"""How long the contestant may take to start, import and say hello (ncu start-up included)."""


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
        self.account = Account(EventWriter(job_dir / EVENTS_FILE))
        self.events = self.account.events
        self.backend: Backend = seat.backend
        assert job.settings is not None  # _read_job refused a job without them
        self.settings = JobSettings.from_wire(job.settings)
        self._rng = random.Random(secrets.randbits(64))
        self._tools = BoundTools(self._rng)
        """Bound before any user code is imported here (guard.py)."""
        self._private = seat.private
        self.arena = seat.arena
        self._proc: ContestantProcess = seat.proc
        self._chan: Channel = seat.chan
        self._wrapped: Wrapped = seat.wrapped
        self._gpu = gpu or GpuSampler.for_backend(self.backend.evidence)
        """NVML readings around timed calls (gpu_state.py), opened before the job if given."""
        self._in_flight = InFlight(job_dir)
        self.calls = Calls(seat, request, self.account, self._gpu, self._in_flight)
        """The round trip with the contestant (calls.py)."""
        self.configs = ConfigRunner(
            request, self.settings, self.calls, self.account, self._gpu, self._rng
        )
        """One config's calls at a time (config_run.py)."""
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
            callables={a: self.job.callables[a] for a in self.req.annotations},
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
            self.account.phase_seconds["judge.waited"] = round(time.monotonic() - t0, 4)
        self._chan.send(cjob.model_dump_json().encode())

    def _named_dirs(self) -> list[str]:
        """The folders of the files the request names, wherever they are (their siblings
        import), and nothing else: the workdir alone would leave an agent's absolute paths
        elsewhere unreadable. A folder that holds job data (this job's private folder and
        slots, and beside them other jobs'; the result store) is never opened whole: only
        the named file in it is (a candidate at /tmp/v1.py must not read /tmp)."""
        held = [p.resolve() for p in (self._private, self.arena.directory, self.job_dir)]
        reads = set()
        for named in self.job.callables.values():
            if named.path is None:
                continue
            path = Path(named.path)
            folder = path.parent
            broad = any(folder == h or folder in h.parents for h in held)
            reads.add(str(path if broad else folder))
        return sorted(reads)

    def load_trusted(self) -> JobExit | None:
        """Import the reference and the input maker, never a candidate's module: the guard
        refuses those imports for the judge's life, and what the trusted code rebinds of the
        judge's own tools fails the job (guard.py)."""
        src = self.job.reference_source_file or self.job.source_file
        source = Path(src) if src else None
        workdir = Path(self.job.workdir)
        self._guard_candidates()
        for role, spec in (("reference", self.req.reference), ("inputs", self.req.inputs)):
            try:
                fn = load_callable(self.job.callables[spec], workdir=workdir, source_file=source)
            except Exception as exc:
                ev = failure_event(spec, "import", exc)
                self.events.emit(ev)
                if ev.error_class == ErrorClass.COMPILE_ERROR:
                    return JobExit.COMPILE_FAILED
                return JobExit.IMPORT_FAILED
            if role == "reference":
                self.configs.ref = fn
            else:
                self.configs.maker = fn
        return self.tools_intact("importing the reference and the input maker")

    def _guard_candidates(self) -> None:
        files: list[Path] = []
        modules = []
        for spec in self.req.candidates:
            named = self.job.callables[spec]
            if named.path is not None:
                files.append(Path(named.path))
            elif named.module is not None:
                modules.append(named.module)
            elif self.job.source_file:
                files.append(Path(self.job.source_file))
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

    # -- the whole job ---------------------------------------------------------------------
    def run(self, spawn_s: float | None = None) -> int:
        # Where a job's wall time goes, for the benchmarks: this process's start until the
        # contestant was spawned ("spawn"; 0 for a pre-started judge, the handover until
        # then for an idle one), then (in "import")
        # until its hello, and its exit at the end.
        if spawn_s is not None:
            self.account.phase_seconds["spawn"] = round(spawn_s, 4)
        try:
            self.send_job()
            if spawn_s:  # a cold job: its contestant's launch is on the job's path
                self._note_launch()
            return self._run()
        except CallTimedOut:
            # A candidate's call outlived its own limit: it alone is lost. The contestant is
            # ended (its process group) and the pipeline runs the others again without it.
            ann, cid, run = self.calls.current
            self._hung = True
            self._proc.cancel.set()
            self.events.emit(
                FailureEvent(
                    annotation=ann,
                    config_id=cid,
                    run=run,
                    phase="profile" if run is not None else "check",
                    error_class=ErrorClass.TIMEOUT,
                    message=f"its call did not return within {self.calls.call_limit_s:.1f} s, "
                    f"the per-call limit ({self.calls.call_limit_why}); its process was ended",
                    hint="fix the hang (a loop that never ends, a wait on something that never "
                    "comes); a call that is only slow gets more time with a larger time_limit_s",
                )
            )
            return int(JobExit.OK)
        except (ContestantGone, TimeoutError) as exc:
            # The contestant died (a crash, its time limit, its memory limit, a kill): the
            # call in flight is named once its process's end says why (`_finish`).
            ann, cid, run = self.calls.current
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
            self.account.phase_seconds["launch"] = round(max(0.0, since_spawn - age), 4)

    def _run(self) -> int:
        with self.account.phase("import"):
            code = self.load_trusted()
            if code is not None:
                return int(code)
            self.calls.hello()
        configs = self.req.configs
        total = (
            len(configs) * (self.configs.untimed_calls + self.req.runs) * len(self.req.annotations)
        )
        done = [0]
        # The reference first, every config, while it is the only code in the contestant;
        # then the candidates. Nothing a candidate leaves running can reach its ranges.
        ref_ok = [
            self.configs.run_config(cid, config, [self.req.reference], done, total)
            for cid, config in enumerate(configs)
        ]
        if configs and not any(ref_ok):
            return int(JobExit.REFERENCE_FAILED)
        broken = self.tools_intact("calling the reference and the input maker")
        if broken is not None:
            return int(broken)
        with self.account.phase("import"):
            self.calls.load_candidates()
        candidates = [a for a in self.req.annotations[1:] if a in self.calls.loaded]
        for cid, config in enumerate(configs):
            if ref_ok[cid] and candidates:
                self.configs.run_config(cid, config, candidates, done, total)
        return int(JobExit.OK)

    def _finish(self) -> None:
        with contextlib.suppress(OSError, AssertionError, ContestantGone):
            self._chan.send(ExitMsg().model_dump_json().encode())
        t0 = time.monotonic()
        outcome = self._proc.wait(timeout=30.0)
        self.account.phase_seconds["exit"] = round(time.monotonic() - t0, 4)
        self.seat.close()
        self._wrapped = self.seat.move_artifacts(self.job_dir)
        with contextlib.suppress(OSError):
            write_issued(self.job_dir / CALLS_FILE, self.calls.issued, primed=self.calls.primed)
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
        self.account.phase_seconds["nvml"] = round(self._gpu.spent_s, 4)
        self.account.phase_seconds["judge"] = round(self.account.judge_s + self._gpu.spent_s, 4)
        self.events.emit(
            DoneEvent(
                phase_seconds=self.account.phase_seconds,
                device=self.calls.device,
                confined=self.calls.confined,
                notes=[*self.account.notes, *self.arena.notes, *self._gpu.notes()],
            )
        )
        self.events.close()
