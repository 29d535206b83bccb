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
standby of a GPU holds its profiler (policy.py has the states and rules). The server makes
no pool when `EngineConfig.standby` is off (every job starts cold).

A pool with a `StandbyMemory` writes the settings of its standbys to the result store
(``standby.json``), so a server started later on that store starts them again at once
(`StandbyPool.prestart`): a restarted server's first request with those settings is handed
to a pre-started pair too. Such a standby is speculative: a job that arrives while it still
starts retires it and starts cold rather than waiting for it (`EngineConfig.standby_at_start`).

A pre-started judge releases its job once the job's events are complete (exit code 0 on a
pipe only it inherits): the result is handed on while the judge's process still ends, and
the next job waits for that end too (`settle`). One judge, its start, handover, release and
retirement, is a `Standby` (prestarted.py); this module is the pool that keeps them.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from nsight_core.plan.config import DEFAULT_IDLE_S, EngineConfig
from nsight_core.processes.sandbox import SandboxOutcome
from nsight_core.protocol import LaunchSpec
from nsight_core.standby.memory import StandbyMemory
from nsight_core.standby.policy import (
    DEFAULT_CAPACITY,
    PoolPolicy,
    StandbyKey,
    holds_profiler,
)
from nsight_core.standby.prestarted import HANDOVER_TIMEOUT_S, Standby, released


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
