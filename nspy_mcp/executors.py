"""Where jobs run: the `Executor` interface and `LocalExecutor`, this host's GPUs.

`nspy_mcp.cluster.DaskExecutor` is the other one. An executor checks a request before it is
queued (the engine's preflight) and runs a job to its end in a worker thread, stopped only
through the job's ``cancel`` event; the queue (jobs.py) keeps the store, waiting and
cancelling.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import anyio
import anyio.abc
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

from nsight_core.plan.admit import Admitted
from nsight_core.plan.config import EngineConfig
from nsight_core.plan.job_plan import job_env
from nsight_core.processes.sandbox import default_memory_limit
from nsight_core.protocol import ProgressEvent
from nsight_core.request import ProfileRequest
from nsight_core.results import ProfileResult
from nsight_core.stages import StageUpdate, preflight_request, run_job
from nsight_core.standby.memory import MEMORY_FILE, StandbyMemory
from nsight_core.standby.policy import StandbyKey
from nsight_core.standby.pool import StandbyPool
from nspy_mcp.devices import DeviceLocks, GpuSlot, _account, resolve_device, with_gpu
from nspy_mcp.progress import ProgressTracker

log = logging.getLogger(__name__)

CANCEL_GRACE_S = 30.0
"""How long a cancelled call waits for the job's process group to be gone. The sandbox
sends SIGTERM, then SIGKILL after a few seconds; this bound only guards against a hang."""


@dataclass(eq=False)
class Job:
    """One submitted profile job and what waiters need to follow it."""

    result_id: str
    request: ProfileRequest
    want: GpuSlot | None
    """The GPU the request names (None: any); local queue only."""
    admitted: Admitted | None
    """The engine's admission of `request` on this host (local queue only): the job runs
    from it, so the preflight is not run again."""
    job_dir: Path
    tracker: ProgressTracker
    cancel: threading.Event = field(default_factory=threading.Event)
    finished: anyio.Event = field(default_factory=anyio.Event)
    thread_exited: threading.Event = field(default_factory=threading.Event)
    queue_scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    started: bool = False
    where: str = ""
    """Where it runs once started: a GPU of this host, or a cluster worker."""
    result: ProfileResult | None = None
    partial: ProfileResult | None = None
    """A staged job's finished stages while later ones run (nsight_core/stages.py)."""
    cancel_reason: str | None = None
    version: int = 0
    submitted: float = field(default_factory=time.monotonic)
    """When it was submitted (time.monotonic): its queue time runs from here to `started`."""
    queued_s: float | None = None
    waits: dict[str, float] = field(default_factory=dict)
    """Seconds waited before its processes ran, by cause (see Provenance.waits): the
    server's share; the engine adds its own (the standby pool's) to the result."""
    _changed: anyio.Event = field(default_factory=anyio.Event)

    def notify(self) -> None:
        """Wake every waiter (call on the event loop)."""
        self.version += 1
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    async def wait_change(self, seen: int) -> None:
        if self.version == seen:
            await self._changed.wait()


class JobReports(Protocol):
    """What an executor tells the queue (jobs.py's `JobQueue`) of a job it runs: the queue
    sits after the executors and is never imported by them."""

    async def started(self, job: Job, where: str) -> None: ...

    def note(self, job: Job, message: str) -> None: ...

    def stage(self, job: Job, update: StageUpdate) -> None: ...

    def progress(self, job: Job, ev: ProgressEvent) -> None: ...


class Executor(Protocol):
    """Where jobs run: this host's GPUs (`LocalExecutor`) or a Dask cluster
    (`nspy_mcp.cluster.DaskExecutor`). The queue keeps the store, waiting and cancelling."""

    async def check(self, request: ProfileRequest) -> tuple[GpuSlot | None, Admitted | None]:
        """Refuse what cannot run (NsightCoreError); the GPU the request names, if any, and
        the engine's admission where the job runs on this host."""
        ...

    async def run(self, job: Job, queue: JobReports) -> ProfileResult | None:
        """Run the job to its end: its result, or None if cancelled before it started.

        Calls `queue.started` once it runs and `queue.progress` with engine events; a
        started job is stopped through `job.cancel`."""
        ...


def parse_executor(spec: str) -> str | None:
    """The scheduler address of `dask://HOST:PORT` (None for `local` or ''); ValueError
    otherwise. A command's `--executor`, else `EngineConfig.executor`."""
    text = spec.strip() or "local"
    if text == "local":
        return None
    m = re.fullmatch(r"dask://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})", text)
    if m is None:
        raise ValueError(
            f"executor {text!r} is not 'local' or 'dask://HOST:PORT' (the Dask scheduler's "
            "address, e.g. dask://gpu-head:8786)"
        )
    return f"tcp://{m.group(1)}:{m.group(2)}"


SERVE_PRESTART_WAIT_S = 5.0
"""How long `nspy-mcp serve` waits for its idle judges' spawn before it goes on starting."""


def start_local(
    store: str | None, executor: str | None, config: EngineConfig
) -> LocalExecutor | None:
    """`nspy-mcp serve`'s executor for this host's GPUs, its idle judges starting now.

    The command calls this before it imports the MCP SDK and builds the server, which take
    longer than the rest of a server's start: a judge started here is further along when a
    fresh server's first request comes, and that request's contestant never waits for it.
    It waits for the judges' spawn (reading the GPUs through NVML first) while it has the
    interpreter to itself, `SERVE_PRESTART_WAIT_S` at most: an NVML that hangs delays the
    server's start by that much, never more. None when jobs go to a Dask cluster (or the
    executor is malformed: the server says so).
    """
    from nsight_core.store.result_store import default_store_root  # lazy: serve only

    try:
        if parse_executor(executor if executor is not None else config.executor) is not None:
            return None
    except ValueError:
        return None
    root = Path(store) if store is not None else default_store_root(config)
    local = LocalExecutor.for_store(root, config)
    local.begin_prestart()
    if not local.wait_prestart(SERVE_PRESTART_WAIT_S):
        log.warning(
            "the GPUs' idle judges were not started within %.0f s (NVML slow?); the server "
            "starts anyway, and its jobs wait for them",
            SERVE_PRESTART_WAIT_S,
        )
    return local


PRESTART_WAIT_S = 30.0
"""How long a job waits for the server's start to have started the remembered standbys."""


class LocalExecutor:
    """Jobs on this host: one per GPU (one at a time on a host without a GPU)."""

    def __init__(
        self,
        locks: DeviceLocks,
        *,
        memory: StandbyMemory | None = None,
        config: EngineConfig | None = None,
    ) -> None:
        self.locks = locks
        self.config = config or EngineConfig()
        """The engine's settings, read once by the server (plan/config.py)."""
        self.memory = memory
        """Where the pools write their standbys' settings (the result store), and whence
        `prestart` reads them."""
        self._pools: dict[str, StandbyPool] = {}
        self._pools_lock = threading.Lock()
        self._closed = False
        self._prestarted = False
        self._prestart_done = threading.Event()
        self._prestart_done.set()

    def standby(self, slot: GpuSlot) -> StandbyPool | None:
        """The slot's pool of pre-started judges (nsight_core/standby/pool.py); None when they are
        turned off (`EngineConfig.standby`) or the server is shutting down."""
        if not self.config.standby:
            return None
        with self._pools_lock:
            if self._closed:
                return None
            pool = self._pools.get(slot.key)
            if pool is None:
                pool = self._pools[slot.key] = StandbyPool(
                    self.config.standby_idle_s,
                    memory=self.memory,
                    slot=slot.key,
                    config=self.config,
                )
            return pool

    @classmethod
    def for_store(
        cls, root: Path, config: EngineConfig, locks: DeviceLocks | None = None
    ) -> LocalExecutor:
        """The executor of a server on the result store at ``root``: its pools remember their
        standbys' settings there (`MEMORY_FILE`), for the next server on that store."""
        return cls(
            locks or DeviceLocks(config.lock_dir, visible=config.visible_devices),
            memory=StandbyMemory(Path(root).expanduser() / MEMORY_FILE),
            config=config,
        )

    def begin_prestart(self) -> None:
        """Start, on a thread, an idle judge per GPU slot and the standbys an earlier server
        on this store left settings for (once per executor; `EngineConfig.standby_at_start`
        off turns both off). Jobs wait for that thread (`PRESTART_WAIT_S` at most), so no
        job is measured while it starts them."""
        with self._pools_lock:
            if self._prestarted or not self.config.prestart:
                return
            self._prestarted = True
            self._prestart_done.clear()
        threading.Thread(target=self._prestart, name="nspy prestart", daemon=True).start()

    def wait_prestart(self, timeout_s: float) -> bool:
        """Until the thread `begin_prestart` started has started its processes (each then
        starts on its own), ``timeout_s`` at most; whether it has."""
        return self._prestart_done.wait(timeout_s)

    def _prestart(self) -> None:
        try:
            self.locks.discover()
            for slot in self.locks.known_slots():
                pool = self.standby(slot)
                if pool is None:
                    continue
                env = job_env(slot.visible, self.config)
                memory = default_memory_limit(self.config.job_memory)
                specs = self.memory.recall(slot.key) if self.memory is not None else []
                pool.prestart([StandbyKey.of(spec, env, memory) for spec in specs])
                # Whatever settings the first new request brings, its judge is started.
                pool.keep_idle(env, memory)
                log.debug("an idle judge is starting for %s", slot.label)
        except Exception:
            log.exception("starting the remembered standbys failed; jobs start cold")
        finally:
            self._prestart_done.set()

    def close(self) -> None:
        """Retire every pre-started judge; no new one starts after this."""
        with self._pools_lock:
            self._closed = True
            pools = list(self._pools.values())
        for pool in pools:
            pool.close()

    async def check(self, request: ProfileRequest) -> tuple[GpuSlot | None, Admitted | None]:
        admitted = await anyio.to_thread.run_sync(
            functools.partial(preflight_request, request, config=self.config)
        )
        return resolve_device(request.device, await self.locks.slots()), admitted

    async def run(self, job: Job, queue: JobReports) -> ProfileResult | None:
        async with contextlib.AsyncExitStack() as stack:
            # Only the wait for the device is cancelled through `queue_scope`; a started
            # job is stopped through its cancel event, so the engine can kill its group.
            slot: GpuSlot | None = None
            with job.queue_scope:
                slot = await stack.enter_async_context(
                    self.locks.take(job.want, lambda m: queue.note(job, m), job.waits)
                )
            if slot is None or job.queue_scope.cancelled_caught or job.cancel.is_set():
                return None
            await queue.started(job, f"{slot.label} in nspy-mcp server pid {os.getpid()}")
            return with_gpu(await self._call_engine(job, queue, slot), slot)
        raise AssertionError("unreachable")  # pragma: no cover - mypy: the stack may swallow

    async def _call_engine(self, job: Job, queue: JobReports, slot: GpuSlot) -> ProfileResult:
        def engine() -> ProfileResult:
            try:
                since = time.monotonic()
                self._prestart_done.wait(PRESTART_WAIT_S)
                _account(job.waits, "prestart", since)
                return run_job(
                    job.admitted or job.request,
                    job.job_dir,
                    result_id=job.result_id,
                    on_progress=lambda ev: queue.progress(job, ev),
                    on_stage=lambda update: queue.stage(job, update),
                    cancel=job.cancel,
                    gpu=slot.visible,
                    standby=self.standby(slot),
                    config=self.config,
                )
            finally:
                job.thread_exited.set()

        try:
            return await anyio.to_thread.run_sync(engine, abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            # This task itself is being cancelled (server shutdown from outside): stop the
            # process group, and do not give the lock back before it is gone.
            if job.cancel_reason is None:
                job.cancel_reason = "the server shut down"
            job.cancel.set()
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(job.thread_exited.wait, CANCEL_GRACE_S)
            raise
