"""Pre-started judges: the next job's processes are up before its request arrives.

A job's fixed cost is its processes' start (python, torch, the CUDA context; under ncu
also ncu's own start): about half of a short ncu job, paid again by every request.
After a request job ends, the pool starts one judge with ``--standby``: it starts its
contestant (wrapped by the backend exactly as the finished job's was) and both import
their frameworks and create their CUDA contexts, then wait. The next job with the same
`LaunchSpec` and environment is handed to it over a socket; any other retires it.

Nothing of a job exists in a standby before the handover: no seed, no request, no
candidate code; the judge draws its seed and the contestant imports the reference (and
only later the candidates) after it, as in a cold start. A pool keeps one standby per
recent setting, two at most (a staged request uses two): each holds a CUDA context (GPU
memory) while it waits, and is retired after its idle limit (`EngineConfig.standby_idle_s`), when
a newer setting displaces it, or when the pool closes. A job starts only once every standby
of its pool has finished starting, so no start-up overlaps a measurement; and at most one
standby of a GPU holds its profiler (pool_policy.py has the states and rules). The server makes
no pool when `EngineConfig.standby` is off (every job starts cold).

A pool with a `StandbyMemory` writes the settings of its standbys to the result store
(``standby.json``), so a server started later on that store starts them again at once
(`StandbyPool.prestart`): a restarted server's first request with those settings is handed
to a pre-started pair too. Such a standby is speculative: a job that arrives while it still
starts retires it and starts cold rather than waiting for it (`EngineConfig.standby_at_start`).

A pre-started judge releases its job once the job's events are complete (exit code 0 on a
pipe only it inherits): the result is handed on while the judge's process still ends, and
the next job waits for that end too (`settle`).
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from nsight_core.plan.config import DEFAULT_IDLE_S, STANDBY_MARGIN_S, EngineConfig
from nsight_core.processes.launch import socket_home
from nsight_core.processes.pool_policy import (
    DEFAULT_CAPACITY,
    PoolPolicy,
    StandbyKey,
    holds_profiler,
)
from nsight_core.processes.sandbox import (
    Deadline,
    SandboxLimits,
    SandboxOutcome,
    StreamCapture,
    run_sandboxed,
)
from nsight_core.processes.seat import plan_launch
from nsight_core.processes.standby_memory import StandbyMemory
from nsight_core.protocol import (
    JUDGE_DIR,
    READY_FILE,
    RELEASE_FD_ENV,
    STANDBY_FILE,
    STANDBY_SOCKET,
    LaunchSpec,
)

HANDOVER_TIMEOUT_S = 120.0
"""How long a handover may wait for the judge to take the job (it may still be starting)."""


def released(argv: list[str], wall_s: float) -> SandboxOutcome:
    """The outcome of a judge that released its job with exit code 0: how it ended, as far
    as the job is concerned (its output streams reach the job directory as files later)."""
    empty = StreamCapture(b"", b"", 0, 0)
    return SandboxOutcome(
        argv=argv,
        exit_code=0,
        signal_name=None,
        timed_out=False,
        cancelled=False,
        wall_s=wall_s,
        stdout=empty,
        stderr=empty,
        error_class=None,
        message="the judge released its job (events complete, exit code 0) and ended after",
    )


class Standby:
    """One pre-started judge (and, through it, its contestant), run by sandbox.py."""

    def __init__(
        self,
        key: StandbyKey,
        idle_s: float,
        config: EngineConfig,
        *,
        speculative: bool = False,
        prestarted: bool = True,
        idle: bool = False,
    ) -> None:
        """Start the judge for ``key``: ``prestarted`` before any job, with its contestant
        (it waits up to ``idle_s``); else an idle judge (judge/boot.py ``--idle``) whose
        contestant starts at the handover (handover.py): for a job handed over at once (a
        cold start: ``key``'s settings are written now, ``idle_s`` is the job's own limit),
        or, with ``idle``, for any spec with ``key``'s environment and memory limit, told
        the job's settings at the handover."""
        self.key = key
        self.idle_s = idle_s
        self.config = config
        """Its server's settings: the tools its contestant's command is wrapped with."""
        self.speculative = speculative
        """Started at the server's start from `StandbyMemory`, not after a job like it: a
        job that arrives while it still starts retires it instead of waiting (`settle`)."""
        self.idle = idle
        self.home = socket_home("nspy-standby-")
        self._private: str | None = None
        if not idle:
            self._write_spec(key.spec, prestarted=prestarted)
        self.deadline = Deadline(idle_s)
        self.cancel = threading.Event()
        self.outcome: SandboxOutcome | None = None
        self.started = time.monotonic()
        self.handed_at = self.started
        """When its job was handed over (`hand`)."""
        self._poll: Callable[[], None] | None = None
        # The judge's release pipe: it writes its exit code there once the job's events are
        # complete (judge.release); only the judge inherits the write end.
        self._release_r, self._release_w = os.pipe()
        env = {**dict(key.env), RELEASE_FD_ENV: str(self._release_w)}
        # A cold judge is an idle one whose settings are written before its start and
        # whose job comes at once: one way for a job to reach a judge (handover.py).
        mode = "--standby" if prestarted and not idle else "--idle"
        argv = [sys.executable, "-P", "-m", "nsight_core.judge.boot", mode, str(self.home)]
        self.argv = argv
        self._thread = threading.Thread(target=self._run, args=(argv, env), daemon=True)
        self._thread.start()

    def _write_spec(self, spec: str, *, prestarted: bool) -> None:
        """The judge's `LaunchSpec` and its contestant's command, so the judge can start it
        before its own imports. Without a plan the judge makes the command itself, and
        reports what failed."""
        (self.home / STANDBY_FILE).write_text(spec)
        with contextlib.suppress(Exception):
            plan = plan_launch(
                LaunchSpec.model_validate_json(spec), self.home, self.config, prestarted=prestarted
            )
            plan.write(self.home)
            self._private = plan.private

    def _run(self, argv: list[str], env: dict[str, str]) -> None:
        try:
            self.outcome = run_sandboxed(
                argv,
                cwd=self.home,
                limits=SandboxLimits(wall_s=self.idle_s, memory_bytes=self.key.memory_bytes),
                deadline=self.deadline,
                env=env,
                cancel=self.cancel,
                poll=self._on_poll,
                output_dir=self.home / JUDGE_DIR,
                pass_fds=(self._release_w,),
            )
        finally:
            os.close(self._release_w)  # the judge has ended: the read end sees EOF

    def _on_poll(self) -> None:
        if self._poll is not None:
            self._poll()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def ready(self) -> bool:
        """Judge and contestant have started (the judge made its ready file)."""
        return (self.home / READY_FILE).exists()

    def fresh(self) -> bool:
        return self.alive() and time.monotonic() - self.started < self.idle_s - STANDBY_MARGIN_S

    def hand(
        self,
        job_dir: Path,
        wall_s: float,
        poll: Callable[[], None] | None,
        spec: str | None = None,
    ) -> str | None:
        """Give the judge ``job_dir`` (its job.json written); None when it took it, else why
        not (the caller then starts the job cold). An idle judge is given ``spec`` (the
        job's key's) and its contestant's command first."""
        if self.idle:
            if spec is None:
                return "an idle judge needs the job's launch settings"
            self._write_spec(spec, prestarted=False)
        self.deadline.arm(wall_s)
        self.handed_at = time.monotonic()
        self._poll = poll
        end = time.monotonic() + HANDOVER_TIMEOUT_S
        path = str(self.home / STANDBY_SOCKET)
        while self.alive() and time.monotonic() < end:
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                    sock.settimeout(0.5)
                    sock.connect(path)
                    sock.sendall(str(job_dir).encode() + b"\n")
                    answer = _read_answer(sock, self.alive, end)
            except (FileNotFoundError, ConnectionRefusedError):
                time.sleep(0.02)  # the judge has not bound its socket yet
                continue
            except OSError as exc:
                return f"handover failed: {exc}"
            return None if answer == "ok" else answer or "the standby judge ended"
        return "the standby judge ended before it took the job"

    def wait(self, cancel: threading.Event | None) -> SandboxOutcome | None:
        """The judge's outcome; None once the judge released its job with exit code 0 (its
        events complete) while its process is still ending. Setting ``cancel`` kills the
        judge and its contestant."""
        watch = True
        while self._thread.is_alive():
            if cancel is not None and cancel.is_set():
                self.cancel.set()
            if not watch:
                self._thread.join(0.1)
                continue
            ready, _, _ = select.select([self._release_r], [], [], 0.1)
            if ready:
                line = os.read(self._release_r, 64)
                if line.strip() == b"0":
                    return None
                watch = False  # another code, or EOF: the judge's outcome says what happened
        assert self.outcome is not None
        return self.outcome

    def collect(self, job_dir: Path) -> None:
        """Move the judge's own output into the job's directory and remove the home (after
        the judge's process has ended)."""
        self._thread.join()
        src = self.home / JUDGE_DIR
        if src.is_dir():
            (job_dir / JUDGE_DIR).mkdir(parents=True, exist_ok=True)
            for f in src.iterdir():
                shutil.move(str(f), str(job_dir / JUDGE_DIR / f.name))
        self._close()

    def retire(self) -> None:
        self.cancel.set()
        self._thread.join()
        self._close()

    def _close(self) -> None:
        if self._release_r >= 0:  # once: a closed number may be reused by another file
            os.close(self._release_r)
            self._release_r = -1
        shutil.rmtree(self.home, ignore_errors=True)
        if self._private is not None:  # the judge removes it; not if it died before it could
            shutil.rmtree(self._private, ignore_errors=True)


def _read_answer(sock: socket.socket, alive: Callable[[], bool], end: float) -> str:
    buf = b""
    while b"\n" not in buf and time.monotonic() < end:
        try:
            chunk = sock.recv(4096)
        except TimeoutError:
            if not alive():
                break
            continue
        if not chunk:
            break
        buf += chunk
    return buf.partition(b"\n")[0].decode("utf-8", "replace").strip()


class StandbyPool:
    """Pre-started judges, one per recent `StandbyKey` (at most `capacity`, the oldest
    retired first): a staged request alternates two settings (screen, profile)."""

    def __init__(
        self,
        idle_s: float | None = None,
        capacity: int = DEFAULT_CAPACITY,
        *,
        memory: StandbyMemory | None = None,
        slot: str = "",
        config: EngineConfig,
    ) -> None:
        self.config = config
        """The server's settings, which its judges' contestants are wrapped with."""
        self.policy = PoolPolicy(max(1, capacity), idle_s if idle_s is not None else DEFAULT_IDLE_S)
        self.memory = memory
        """Where the settings of this pool's standbys are written (`slot` names the pool)."""
        self.slot = slot
        self._lock = threading.Lock()
        self._spares: dict[StandbyKey, Standby] = {}
        self._closed = False
        self._draining: list[threading.Thread] = []
        """Released jobs' judges still ending (`run`), waited for before the next job."""
        self._idle: Standby | None = None
        """The idle judge (handover.py): any job of its environment that finds no standby of
        its own settings goes to it rather than to a cold start."""
        self._idle_base: StandbyKey | None = None
        """The environment and memory limit an idle judge is kept for (`keep_idle`)."""
        self.taken = 0
        """Jobs handed to a standby so far (the tests and benchmarks read it)."""
        self.taken_idle = 0
        """Jobs handed to an idle judge so far."""
        self.released = 0
        """Of those, jobs whose judge released them before its process had ended."""

    @property
    def spare(self) -> Standby | None:
        """The most recent standby waiting now, if any (it may still be starting)."""
        with self._lock:
            return next(reversed(self._spares.values()), None)

    @property
    def idle(self) -> Standby | None:
        """The idle judge kept now, if any (it may still be starting)."""
        with self._lock:
            return self._idle

    def _take(self, key: StandbyKey) -> Standby | None:
        """The standby for ``key``, removed from the pool; None when there is no fresh one."""
        with self._lock:
            spare = self._spares.pop(key, None)
        if spare is None:
            return None
        if spare.fresh():
            return spare
        spare.retire()
        return None

    def run(
        self,
        key: StandbyKey,
        job_dir: Path,
        *,
        wall_s: float,
        poll: Callable[[], None] | None,
        cancel: threading.Event | None,
    ) -> SandboxOutcome:
        """Run the job in ``job_dir`` on a judge for ``key`` and wait for its end: the
        standby for ``key`` when there is a fresh one, else a judge started cold for it
        (the same start, handed the job at once). The judge's outcome."""
        spare = self._take(key)
        if spare is not None and spare.hand(job_dir, wall_s, poll) is not None:
            spare.retire()  # it did not take the job (it ended, or refused it): start cold
            spare = None
        elif spare is not None:
            self.taken += 1
        if spare is None:
            spare = self._take_idle(key)
            if spare is not None and spare.hand(job_dir, wall_s, poll, key.spec) is not None:
                spare.retire()
                spare = None
            elif spare is not None:
                self.taken_idle += 1
        if spare is None:
            spare = Standby(key, wall_s, self.config, prestarted=False)
            why = spare.hand(job_dir, wall_s, poll)
            if why is not None:  # it ended before it took the job: how it ended is the error
                spare.cancel.set()
                spare.collect(job_dir)
                assert spare.outcome is not None
                return spare.outcome
        outcome = spare.wait(cancel)
        if outcome is not None:
            spare.collect(job_dir)
            return outcome
        # Released: the job's events are complete and the judge exited 0 in all but fact.
        # Its process ends (and its own log reaches the job directory) in the background;
        # the next job waits for that (`settle`), so no teardown overlaps a measurement.
        drain = threading.Thread(target=spare.collect, args=(job_dir,), daemon=True)
        drain.start()
        with self._lock:
            self._draining.append(drain)
            self.released += 1
        return released(spare.argv, time.monotonic() - spare.handed_at)

    def _take_idle(self, key: StandbyKey) -> Standby | None:
        """The idle judge, removed from the pool, when it serves ``key``'s environment."""
        with self._lock:
            idle = self._idle
            if idle is None or not self.policy.serves(idle.key, key):
                return None
            self._idle = None
        if idle.fresh():
            return idle
        idle.retire()
        return None

    def keep_idle(self, env: Mapping[str, str], memory_bytes: int | None) -> None:
        """Keep an idle judge for jobs with this environment and memory limit: one starts
        now, and another after each job that took one (`refill`)."""
        with self._lock:
            self._idle_base = StandbyKey("", tuple(sorted(env.items())), memory_bytes)
        self._start_idle()

    def _start_idle(self) -> None:
        with self._lock:
            base = self._idle_base
            if self._closed or base is None or (self._idle is not None and self._idle.alive()):
                return
            old, self._idle = self._idle, Standby(base, self.policy.idle_s, self.config, idle=True)
        if old is not None:
            old.retire()

    def settle(
        self, key: StandbyKey | None = None, timeout_s: float = HANDOVER_TIMEOUT_S
    ) -> dict[str, float]:
        """Wait until no standby is still starting and no released judge is still ending:
        imports, CUDA context creation and teardown must not overlap a job's measurements on
        the same GPU. A speculative standby still starting is retired instead, whatever its
        settings: its start (it also imports Triton and warms its GPU path) takes longer than
        a cold job's, so waiting for it would make the job slower than starting cold
        (docs/sandbox.md has the measurement).

        ``key``: the next job's, which decides whether an idle judge still starting is
        that job's judge (it goes on) or would overlap it (it is retired; another starts
        after the job).

        Returns the seconds waited by cause ('standby': starting or retiring standbys,
        'previous_job': a released judge ending), for the job's provenance: a request sent
        right after another can wait here longer than its own processes run, and an answer
        that hid this would send the agent looking for the time in the wrong place."""
        start = time.monotonic()
        end = start + timeout_s
        doomed: list[Standby] = []
        with self._lock:
            for k, spare in list(self._spares.items()):
                if spare.speculative and not spare.ready():
                    doomed.append(self._spares.pop(k))
                elif key is not None and self.policy.rivals(k, key):
                    doomed.append(self._spares.pop(k))  # one profiler per GPU: the job's
            # An idle judge still starting may go on only if ``key``'s job is its own (it
            # starts its contestant at the handover and sends nothing before its start is
            # done); if the job goes elsewhere (another environment, or a standby of its own
            # settings), its start would overlap the job. Without a key it is left to start.
            idle = self._idle
            if (
                idle is not None
                and key is not None
                and not idle.ready()
                and not (self.policy.serves(idle.key, key) and key not in self._spares)
            ):
                doomed.append(idle)
                self._idle = None
            spares = list(self._spares.values())
            draining = list(self._draining)
        for spare in doomed:
            spare.retire()
        retired = time.monotonic()
        for drain in draining:
            drain.join(max(0.0, end - time.monotonic()))
        with self._lock:
            self._draining = [d for d in self._draining if d.is_alive()]
        drained = time.monotonic()
        for spare in spares:
            while spare.alive() and not spare.ready() and time.monotonic() < end:
                time.sleep(0.02)
        waits = {
            "standby": (retired - start) + (time.monotonic() - drained),
            "previous_job": drained - retired,
        }
        return {cause: s for cause, s in waits.items() if s > 0}

    def refill(self, key: StandbyKey, *, speculative: bool = False) -> None:
        """Start the standby for the next job like this one (retiring the oldest others)."""
        with self._lock:
            if self._closed:
                return
            old = [self._spares.pop(k) for k in self.policy.displaced(self._spares, key)]
        for sb in old:  # ended before the new one starts: a profiler is held until its end
            sb.retire()
        with self._lock:
            if self._closed:
                return
            self._spares[key] = Standby(
                key, self.policy.idle_s, self.config, speculative=speculative
            )
            specs = [LaunchSpec.model_validate_json(k.spec) for k in self._spares]
        if not speculative:
            self._start_idle()  # the next job with new settings: the one before took it
        if self.memory is not None and not speculative:
            self.memory.note(self.slot, specs)

    def release_profiler(self) -> None:
        """Retire every standby that holds its GPU's profiler (before a job is retried
        because ncu found the profiler held)."""
        with self._lock:
            held = [k for k in self._spares if holds_profiler(k.spec)]
            spares = [self._spares.pop(k) for k in held]
        for spare in spares:
            spare.retire()

    def prestart(self, keys: list[StandbyKey]) -> None:
        """Start standbys for ``keys`` (oldest first), remembered from an earlier server:
        speculative: a job that finds one still starting retires it (`settle`)."""
        for key in keys[-self.policy.capacity :]:
            self.refill(key, speculative=True)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            spares, self._spares = list(self._spares.values()), {}
            if self._idle is not None:
                spares.append(self._idle)
                self._idle = None
        for spare in spares:
            with contextlib.suppress(Exception):
                spare.retire()
        self.settle()  # released judges end under their own limits; wait for them
