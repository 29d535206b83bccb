"""The job queue behind `profile_candidates`: one job at a time per GPU, cancellable.

Contract:

- `JobQueue.submit` asks the executor to check the request (the engine's preflight: bad
  metrics, missing ncu, no GPU; an unknown `device`) and raises `NsightCoreError` before
  anything is queued; then it registers the job in the store and starts it in the task
  group of the server's lifespan, so a job outlives the call that started it.
- Executors decide where a job runs. `LocalExecutor` (the default) uses this host's GPUs
  through `DeviceLocks`: one lock per GPU (listed from NVML as CUDA_VISIBLE_DEVICES leaves
  them; one ``cpu`` slot on a host without a GPU), an ``flock`` per GPU so nspy-mcp servers
  in other processes of this user wait too, waiting jobs served in order, a free idle GPU
  preferred to one that other processes use, a named `device` honoured. The job's processes
  see only its GPU (CUDA_VISIBLE_DEVICES), and its rows record the GPU's index, UUID and
  name. `nspy_mcp.cluster.DaskExecutor` sends jobs to a Dask cluster instead.
- The engine (`nsight_core.stages.run_job`: `pipeline.run_profile_job`, or the stages of a
  request with `stages`) is synchronous; it runs in a worker
  thread and is stopped only through its ``cancel`` event, on which it kills the job's
  process group. A job's store record ends as done, failed or cancelled in every case,
  including cancellation of the task itself.
- `JobQueue.wait` waits up to ``wait_s`` while relaying progress; if the waiting call is
  cancelled (client cancel or client timeout) and it owns the job, the job is cancelled and
  the call waits, shielded and bounded, until the process group is gone.
- While a staged job runs, `JobQueue.snapshot` shows the finished stages' rows, every
  stage's state and the running stage's ETA (`JobQueue.stage` takes them from the engine).
- `JobQueue.cancel_and_wait` (read_results with cancel=true) cancels a job on request and
  waits, bounded, until its store record is final.
- A finished job none of whose candidates passed (import or check failed for all of them)
  is recorded 'failed', with a message that says so first: the reference's rows alone must
  not read as a success.
- `JobQueue.shutdown` (lifespan exit) cancels every unfinished job.

Size: about 700 lines: the queue, per-GPU scheduling and cancellation share one lock
discipline; the Dask executor lives apart in cluster.py.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import anyio
import anyio.abc
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.host.probe import gpu_process_counts, list_gpus
from nsight_core.pipeline import job_env
from nsight_core.processes.standby import (
    StandbyKey,
    StandbyMemory,
    StandbyPool,
    prestart_enabled,
    standby_enabled,
)
from nsight_core.protocol import ProgressEvent
from nsight_core.request import ProfileRequest
from nsight_core.results import ProfileResult
from nsight_core.rows.assemble import with_waits
from nsight_core.stages import StageUpdate, preflight_request, run_job
from nsight_core.store.result_store import TERMINAL, ResultStore
from nspy_mcp.progress import ProgressTracker, ProgressUpdate

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no cross-process device lock
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

CANCEL_GRACE_S = 30.0
"""How long a cancelled call waits for the job's process group to be gone. The sandbox
sends SIGTERM, then SIGKILL after a few seconds; this bound only guards against a hang."""

CROSS_PROCESS_POLL_S = 0.25
"""Retry interval while another process holds the device's lock file."""

BUSY_TTL_S = 1.0
"""How long a reading of which GPUs other processes use is trusted while jobs wait."""

LOCK_DIR_ENV = "NSPY_MCP_LOCK_DIR"

ProgressSink = Callable[[ProgressUpdate], Awaitable[None]]


@dataclass(frozen=True)
class GpuSlot:
    """One place a job runs: a GPU (NVML index, UUID, name) or, on a host without one, the CPU."""

    key: str
    """Lock name: ``gpu-<index>`` (or ``gpu-<uuid>`` for a GPU NVML does not list), ``cpu``."""
    index: int | None = None
    uuid: str | None = None
    name: str | None = None
    visible: str | None = None
    """CUDA_VISIBLE_DEVICES for the job's processes (the UUID when known); None: the CPU."""

    @property
    def label(self) -> str:
        if self.visible is None:
            return "the CPU (no GPU visible)"
        ident = ", ".join(x for x in (self.name, self.uuid) if x)
        number = self.index if self.index is not None else self.visible
        return f"GPU {number}" + (f" ({ident})" if ident else "")


CPU_SLOT = GpuSlot("cpu")


def gpu_slot(index: int, uuid: str | None = None, name: str | None = None) -> GpuSlot:
    """The slot of the GPU NVML numbers `index`."""
    return GpuSlot(f"gpu-{index}", index, uuid, name, uuid or str(index))


def discover_slots() -> list[GpuSlot]:
    """This host's GPUs as CUDA_VISIBLE_DEVICES leaves them, in its order; else the CPU slot.

    Indices in CUDA_VISIBLE_DEVICES are taken as NVML's (PCI order: set
    CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA agrees); UUIDs and their prefixes match by UUID.
    """
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None and cvd.strip() in {"", "-1"}:
        return [CPU_SLOT]
    gpus = list_gpus()
    if not gpus:
        return [CPU_SLOT]
    if cvd is None:
        return [gpu_slot(g.index, g.uuid, g.name) for g in gpus]
    slots: list[GpuSlot] = []
    for entry in (e.strip() for e in cvd.split(",")):
        if not entry:
            continue
        match = next((g for g in gpus if g.uuid and g.uuid.startswith(entry)), None)
        if match is None and entry.isdigit():
            match = next((g for g in gpus if g.index == int(entry)), None)
        if match is not None:
            slots.append(gpu_slot(match.index, match.uuid, match.name))
        else:  # a MIG instance or a name NVML lists differently: pass it on as given
            slots.append(GpuSlot(f"gpu-{re.sub(r'[^A-Za-z0-9_-]', '_', entry)}", visible=entry))
    return slots or [CPU_SLOT]


def resolve_device(device: int | str | None, slots: list[GpuSlot]) -> GpuSlot | None:
    """The slot a request's `device` names (None: any); raises NsightCoreError if none."""
    if device is None:
        return None
    for slot in slots:
        if isinstance(device, int) and slot.index == device:
            return slot
        if isinstance(device, str) and device.lower() in {
            (slot.uuid or "").lower(),
            (slot.visible or "").lower(),
        }:
            return slot
    gpus = [s for s in slots if s.visible is not None]
    listed = "; ".join(s.label for s in gpus) if gpus else "none (no GPU is visible here)"
    raise NsightCoreError(
        ErrorClass.INVALID_REQUEST,
        f"device {device!r} is not a GPU this server can use; its GPUs: {listed}",
        "pass one of those indices or UUIDs (check_environment lists them), or leave device "
        "unset to take the first free, idle GPU",
    )


def with_gpu(result: ProfileResult, slot: GpuSlot) -> ProfileResult:
    """The result with the GPU it ran on recorded in its provenance and every row."""
    if slot.visible is None:
        return result
    rows = [
        r.model_copy(
            update={"GPUIndex": slot.index, "GPUUUID": slot.uuid, "GPU": r.GPU or slot.name}
        )
        for r in result.rows
    ]
    update: dict[str, object] = {"rows": rows}
    if result.provenance is not None:
        prov = result.provenance
        update["provenance"] = prov.model_copy(
            update={
                "gpu": prov.gpu or slot.name,
                "gpu_uuid": slot.uuid or prov.gpu_uuid,
                "gpu_index": slot.index,
            }
        )
    return result.model_copy(update=update)


def _lock_dir() -> Path:
    env = os.environ.get(LOCK_DIR_ENV, "").strip()
    if env:
        return Path(env)
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"nspy-mcp-{uid}"


BusyReader = Callable[[], dict[int, int]]


@dataclass(eq=False)
class _Ticket:
    """A job waiting for a slot: the one it names, or any."""

    want: GpuSlot | None
    slot: GpuSlot | None = None


class DeviceLocks:
    """One job at a time per GPU (or the CPU), within this process and across processes.

    Waiting jobs are served in order. A job that names no GPU gets a free, idle one (no
    other process on it, by `busy`, read from NVML); while only busy GPUs are free it waits
    for one of this server's jobs to end, and takes the least busy one once none runs.
    """

    def __init__(
        self,
        lock_dir: Path | None = None,
        *,
        gpus: list[GpuSlot] | None = None,
        busy: BusyReader | None = None,
    ) -> None:
        self._dir = lock_dir
        self._slots = gpus
        self._discover_lock = threading.Lock()
        self._busy_reader = busy
        self._busy: dict[int, int] = {}
        self._busy_read_at = -1e9
        self._held: dict[str, int | None] = {}
        self._waiting: list[_Ticket] = []
        self._changed = anyio.Event()

    async def slots(self) -> list[GpuSlot]:
        """The slots jobs share (NVML is read once, on first use)."""
        if self._slots is None:
            await anyio.to_thread.run_sync(self.discover)
        assert self._slots is not None
        return self._slots

    def known_slots(self) -> list[GpuSlot]:
        """The slots, once `discover` has read them (else none)."""
        return list(self._slots or [])

    def discover(self) -> None:
        """Read the slots now, from any thread (the server starts it at start, so the first
        request finds them read or waits for that one read); a no-op once they are known."""
        with self._discover_lock:
            if self._slots is None:
                self._slots = discover_slots()

    @contextlib.asynccontextmanager
    async def hold(self, key: str, on_wait: Callable[[str], None]) -> AsyncIterator[None]:
        """Wait for the slot with this lock name alone."""
        slot = next((s for s in await self.slots() if s.key == key), GpuSlot(key))
        async with self.take(slot, on_wait):
            yield

    @contextlib.asynccontextmanager
    async def take(
        self,
        want: GpuSlot | None,
        on_wait: Callable[[str], None],
        waits: dict[str, float] | None = None,
    ) -> AsyncIterator[GpuSlot]:
        """Wait for `want` (None: the best free slot) and hold it for the block.

        `waits` receives the seconds waited by cause: 'queue' (behind this server's jobs)
        and 'device' (another process's lock, or GPUs busy with other processes)."""
        await self.slots()
        ticket = _Ticket(want)
        self._waiting.append(ticket)
        told: set[str] = set()
        try:
            while True:
                await self._refresh_busy()
                self._dispatch()
                if ticket.slot is not None:
                    break
                why = self._why_waiting(ticket)
                if why not in told:
                    told.add(why)
                    on_wait(why)
                changed = self._changed
                since = time.monotonic()
                with anyio.move_on_after(CROSS_PROCESS_POLL_S):
                    await changed.wait()
                _account(waits, "queue" if OURS in why else "device", since)
        except BaseException:
            if ticket.slot is not None:  # given to it just as it was cancelled
                self._release(ticket.slot)
            raise
        finally:
            self._waiting.remove(ticket)
        try:
            yield ticket.slot
        finally:
            self._release(ticket.slot)

    # -- placing -------------------------------------------------------------------------

    def _dispatch(self) -> None:
        """Give free slots to waiting jobs, oldest first (no await: one pass at a time)."""
        placed = False
        for ticket in self._waiting:
            if ticket.slot is not None:
                continue
            for slot in self._choices(ticket):
                if slot.key in self._held:
                    continue
                fd = self._try_flock(slot.key)
                if fd is False:
                    continue
                self._held[slot.key] = fd if isinstance(fd, int) else None
                ticket.slot = slot
                placed = True
                break
        if placed:
            self._notify()

    def _choices(self, ticket: _Ticket) -> list[GpuSlot]:
        assert self._slots is not None
        if ticket.want is not None:
            return [ticket.want]
        free = [s for s in self._slots if s.key not in self._held]
        idle = [s for s in free if not self._busy_count(s)]
        if idle:
            return idle
        if self._held:  # one of ours ends sooner or later: wait for it rather than share
            return []
        return sorted(free, key=self._busy_count)

    def _busy_count(self, slot: GpuSlot) -> int:
        return self._busy.get(slot.index, 0) if slot.index is not None else 0

    def _why_waiting(self, ticket: _Ticket) -> str:
        """Why the ticket waits; the words name whose jobs it waits for (`OURS`)."""
        assert self._slots is not None
        wanted = [ticket.want] if ticket.want is not None else self._slots
        ours = [s.key for s in wanted if s.key in self._held]
        if len(ours) == len(wanted):
            return f"queued: another job {OURS} is using {', '.join(ours)}"
        free = [s for s in wanted if s.key not in self._held]
        if ticket.want is None and all(self._busy_count(s) for s in free):
            keys = ", ".join(s.key for s in free)
            return f"queued: waiting for an idle GPU ({keys} in use by other processes)"
        if ticket.want is None and any(
            t.want is None for t in self._waiting[: self._waiting.index(ticket)]
        ):
            return f"queued: behind other jobs {OURS}"
        keys = ", ".join(s.key for s in free)
        return f"queued: another nspy-mcp process is using {keys}"

    async def _refresh_busy(self) -> None:
        assert self._slots is not None
        if not any(s.index is not None for s in self._slots) and self._busy_reader is None:
            return
        now = anyio.current_time()
        if now - self._busy_read_at < BUSY_TTL_S:
            return
        self._busy_read_at = now
        reader = self._busy_reader or _nvml_busy
        self._busy = await anyio.to_thread.run_sync(reader)

    # -- the cross-process part ----------------------------------------------------------

    def _try_flock(self, key: str) -> int | bool:
        """A held lock file descriptor; True where flock does not exist; False if taken."""
        if fcntl is None:  # pragma: no cover
            return True
        directory = self._dir or _lock_dir()
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(directory / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        return fd

    def _release(self, slot: GpuSlot) -> None:
        fd = self._held.pop(slot.key, None)
        if fd is not None:
            os.close(fd)  # drops the flock
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, anyio.Event()
        changed.set()


def _nvml_busy() -> dict[int, int]:
    return gpu_process_counts()


OURS = "of this server"
"""In a reason to wait: the job waits for this server's own jobs (a 'queue' wait), not for
another process (a 'device' wait)."""


def _account(waits: dict[str, float] | None, cause: str, since: float) -> None:
    """Add the seconds since `since` to `waits[cause]`."""
    if waits is not None:
        waits[cause] = waits.get(cause, 0.0) + time.monotonic() - since


@dataclass(eq=False)
class Job:
    """One submitted profile job and what waiters need to follow it."""

    result_id: str
    request: ProfileRequest
    want: GpuSlot | None
    """The GPU the request names (None: any); local queue only."""
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


class Executor(Protocol):
    """Where jobs run: this host's GPUs (`LocalExecutor`) or a Dask cluster
    (`nspy_mcp.cluster.DaskExecutor`). The queue keeps the store, waiting and cancelling."""

    async def check(self, request: ProfileRequest) -> GpuSlot | None:
        """Refuse what cannot run (NsightCoreError); the GPU the request names, if any."""
        ...

    async def run(self, job: Job, queue: JobQueue) -> ProfileResult | None:
        """Run the job to its end: its result, or None if cancelled before it started.

        Calls `queue.started` once it runs and `queue.progress` with engine events; a
        started job is stopped through `job.cancel`."""
        ...


PRESTART_WAIT_S = 30.0
"""How long a job waits for the server's start to have started the remembered standbys."""


class LocalExecutor:
    """Jobs on this host: one per GPU (one at a time on a host without a GPU)."""

    def __init__(
        self,
        locks: DeviceLocks,
        *,
        final_backend: str | None = None,
        memory: StandbyMemory | None = None,
    ) -> None:
        self.locks = locks
        self.final_backend = final_backend
        """Backend of a staged request's profile stage instead of the request's (ncu): for
        tests on hosts without ncu."""
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
        """The slot's pool of pre-started judges (nsight_core/processes/standby.py); None when they are
        turned off (NSPY_MCP_STANDBY=0) or the server is shutting down."""
        if not standby_enabled():
            return None
        with self._pools_lock:
            if self._closed:
                return None
            pool = self._pools.get(slot.key)
            if pool is None:
                pool = self._pools[slot.key] = StandbyPool(memory=self.memory, slot=slot.key)
            return pool

    def begin_prestart(self) -> None:
        """Start, on a thread, the standbys an earlier server on this store left settings
        for (once per executor; NSPY_MCP_STANDBY_AT_START=0 turns it off). Jobs wait for that
        thread (`PRESTART_WAIT_S` at most), so no job is measured while it starts them."""
        with self._pools_lock:
            if self._prestarted or self.memory is None or not prestart_enabled():
                return
            self._prestarted = True
            self._prestart_done.clear()
        threading.Thread(target=self._prestart, name="nspy prestart", daemon=True).start()

    def _prestart(self) -> None:
        try:
            assert self.memory is not None
            self.locks.discover()
            for slot in self.locks.known_slots():
                specs = self.memory.recall(slot.key)
                pool = self.standby(slot) if specs else None
                if pool is not None:
                    env = job_env(slot.visible)
                    pool.prestart([StandbyKey.of(spec, env) for spec in specs])
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

    async def check(self, request: ProfileRequest) -> GpuSlot | None:
        await anyio.to_thread.run_sync(
            functools.partial(preflight_request, request, final_backend=self.final_backend)
        )
        return resolve_device(request.device, await self.locks.slots())

    async def run(self, job: Job, queue: JobQueue) -> ProfileResult | None:
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

    async def _call_engine(self, job: Job, queue: JobQueue, slot: GpuSlot) -> ProfileResult:
        def engine() -> ProfileResult:
            try:
                since = time.monotonic()
                self._prestart_done.wait(PRESTART_WAIT_S)
                _account(job.waits, "prestart", since)
                return run_job(
                    job.request,
                    job.job_dir,
                    result_id=job.result_id,
                    on_progress=lambda ev: queue.progress(job, ev),
                    on_stage=lambda update: queue.stage(job, update),
                    cancel=job.cancel,
                    gpu=slot.visible,
                    final_backend=self.final_backend,
                    standby=self.standby(slot),
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


class JobQueue:
    """Submits, runs, follows and cancels profile jobs; lives in the server's lifespan."""

    def __init__(
        self,
        store: ResultStore,
        task_group: anyio.abc.TaskGroup,
        executor: Executor | DeviceLocks,
    ) -> None:
        self._store = store
        self._tg = task_group
        self._executor = LocalExecutor(executor) if isinstance(executor, DeviceLocks) else executor
        self._jobs: dict[str, Job] = {}
        self._token = anyio.lowlevel.current_token()

    # -- submitting and following --------------------------------------------------------

    async def submit(self, request: ProfileRequest) -> Job:
        """Check the request, register it and start it; raises NsightCoreError if refused."""
        want = await self._executor.check(request)
        placeholder = await anyio.to_thread.run_sync(self._store.create, request)
        job = Job(
            result_id=placeholder.result_id,
            request=request,
            want=want,
            job_dir=self._store.result_dir(placeholder.result_id),
            tracker=ProgressTracker(request),
        )
        self._jobs[job.result_id] = job
        self._tg.start_soon(self._run, job, name=f"nspy job {job.result_id}")
        return job

    def get(self, result_id: str) -> Job | None:
        """The live job with this id, if this server runs it and it has not finished."""
        return self._jobs.get(result_id)

    async def wait(
        self, job: Job, wait_s: float, report: ProgressSink | None, *, owner: bool
    ) -> ProfileResult:
        """The final result if the job ends within `wait_s`, else a queued/running snapshot.

        `owner`: the caller started the job, so cancelling the call cancels the job.
        """
        seen, relayed = -1, None
        try:
            with anyio.move_on_after(wait_s):
                while not job.finished.is_set():
                    if job.version != seen:
                        seen = job.version
                        latest = job.tracker.latest
                        if latest != relayed:
                            relayed = latest
                            await _relay(report, latest)
                    await job.wait_change(seen)
        except anyio.get_cancelled_exc_class():
            if owner:
                self.cancel(
                    job, "the profile_candidates call was cancelled (client cancel or timeout)"
                )
                with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_GRACE_S):
                    await job.finished.wait()
            raise
        if job.finished.is_set() and job.result is not None:
            await _relay(report, ProgressUpdate(100.0, 100.0, job.result.status, 0.0))
            return job.result
        return self.snapshot(job)

    def snapshot(self, job: Job) -> ProfileResult:
        """The job as it stands, with a message saying what to call next."""
        if job.result is not None:
            return job.result
        latest = job.tracker.latest
        if job.started and job.partial is not None:
            return self._staged_snapshot(job, job.partial)
        if job.started:
            status = "running"
            state = f"running on {job.where}: {latest.progress:.0f} %, {latest.message}"
        else:
            status = "queued"
            ahead = sum(
                1
                for other in self._jobs.values()
                if not other.started and other is not job and other.result_id < job.result_id
            )
            state = (
                f"queued behind {ahead} waiting job(s); {latest.message}"
                if ahead
                else latest.message
            )
        message = (
            f"{state}; call read_results with result_id={job.result_id} "
            f"({latest.eta_text()}); pass wait_s to wait for it there"
        )
        created = self._store.summary(job.result_id).created_at
        return ProfileResult(
            result_id=job.result_id, status=status, message=message, created_at=created
        )

    def _staged_snapshot(self, job: Job, partial: ProfileResult) -> ProfileResult:
        """A staged job as it stands: finished stages' rows, the running stage and its ETA."""
        latest = job.tracker.latest
        stages = [
            s.model_copy(update={"EtaS": round(latest.eta_s, 1)})
            if s.Status == "running" and latest.eta_s is not None
            else s
            for s in partial.stages
        ]
        done = [s.Stage for s in stages if s.Status not in ("running", "pending")]
        shown = (
            f"rows of the finished stage(s) {done} are below (the screen's numbers rank "
            "candidates; report the profile stage's); "
            if done
            else ""
        )
        message = (
            f"running on {job.where}: {latest.progress:.0f} %, {latest.message}; {shown}"
            f"call read_results with result_id={job.result_id} ({latest.eta_text()}); pass "
            "wait_s to wait for it there"
        )
        return partial.model_copy(
            update={"result_id": job.result_id, "message": message, "stages": stages}
        )

    def cancel(self, job: Job, reason: str) -> None:
        """Ask the job to stop: dequeue it, or kill its process group (call on the loop)."""
        if job.finished.is_set():
            return
        if job.cancel_reason is None:
            job.cancel_reason = reason
        job.cancel.set()
        job.queue_scope.cancel()
        job.notify()

    async def cancel_and_wait(self, job: Job, reason: str) -> ProfileResult:
        """Cancel the job and answer its final record once its process group is gone."""
        self.cancel(job, reason)
        with anyio.move_on_after(CANCEL_GRACE_S):
            await job.finished.wait()
        return self.snapshot(job)

    def shutdown(self) -> None:
        """Cancel every unfinished job; the lifespan's task group then waits for them."""
        for job in list(self._jobs.values()):
            self.cancel(job, "the server shut down")

    # -- what executors call -------------------------------------------------------------

    async def started(self, job: Job, where: str) -> None:
        """The job runs now, on `where` (a GPU of this host or a cluster worker)."""
        job.started = True
        job.where = where
        # Whatever part of the queue time no executor attributed to another process's
        # device (a cluster's scheduling included) was spent behind other jobs.
        job.queued_s = time.monotonic() - job.submitted
        job.waits["queue"] = max(0.0, job.queued_s - job.waits.get("device", 0.0))
        self.note(job, "started")
        note = f"running on {where}; call read_results with result_id={job.result_id} to follow it"
        await anyio.to_thread.run_sync(self._store.mark_running, job.result_id, note)

    def note(self, job: Job, message: str) -> None:
        """A state change for waiters (call on the event loop)."""
        job.tracker.note(message)
        job.notify()

    def stage(self, job: Job, update: StageUpdate) -> None:
        """A stage of a staged job starts (from the engine's thread)."""
        job.partial = update.partial
        job.tracker.stage(update)
        with contextlib.suppress(Exception):  # the loop may be gone at shutdown
            anyio.from_thread.run_sync(job.notify, token=self._token)

    def progress(self, job: Job, ev: ProgressEvent) -> None:
        """An engine progress event (from the engine's thread)."""
        job.tracker.update(ev)
        with contextlib.suppress(Exception):  # the loop may be gone at shutdown
            anyio.from_thread.run_sync(job.notify, token=self._token)

    # -- running -----------------------------------------------------------------------

    async def _run(self, job: Job) -> None:
        result: ProfileResult | None = None
        try:
            result = await self._run_to_end(job)
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                result = await anyio.to_thread.run_sync(self._record_abort, job, exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            job.result = result
            self._jobs.pop(job.result_id, None)
            job.finished.set()
            job.notify()

    async def _run_to_end(self, job: Job) -> ProfileResult:
        result = await self._executor.run(job, self)
        if result is None:
            return await self._cancelled_before_start(job)
        return await anyio.to_thread.run_sync(self._store.finish, self._normalize(job, result))

    async def _cancelled_before_start(self, job: Job) -> ProfileResult:
        def record() -> ProfileResult:
            return self._store.fail(
                job.result_id,
                ErrorClass.CANCELLED,
                f"cancelled before it started: {job.cancel_reason or 'cancelled'}",
                status="cancelled",
            )

        # Not abandoned on cancel: the thread writes the record, then cancellation goes on.
        return await anyio.to_thread.run_sync(record)

    def _normalize(self, job: Job, result: ProfileResult) -> ProfileResult:
        result = with_waits(result, job.waits, queued_s=job.queued_s)
        update: dict[str, object] = {"result_id": job.result_id}
        cancelled = result.error is not None and result.error.ErrorClass is ErrorClass.CANCELLED
        if cancelled or (job.cancel.is_set() and result.status not in TERMINAL):
            update["status"] = "cancelled"
            reason = job.cancel_reason or "cancelled"
            update["message"] = f"cancelled: {reason}; its process group was killed"
            return result.model_copy(update=update)
        return result.model_copy(update=update)

    def _record_abort(self, job: Job, exc: BaseException) -> ProfileResult | None:
        """Finish the store record of a job whose task ended by an exception (thread side)."""
        try:
            current = self._store.load(job.result_id)
            if current.status in TERMINAL:
                return current
            if job.cancel.is_set() or not isinstance(exc, Exception):
                return self._store.fail(
                    job.result_id,
                    ErrorClass.CANCELLED,
                    job.cancel_reason or "the server shut down",
                    status="cancelled",
                )
            log.error("profile job %s failed inside the server", job.result_id, exc_info=exc)
            return self._store.fail(
                job.result_id,
                ErrorClass.CRASHED,
                f"internal error in the nspy-mcp job queue: {type(exc).__name__}: {exc}",
                hint="run it again; if it repeats, report it with the server's stderr log",
            )
        except Exception:
            log.exception("could not record the end of job %s", job.result_id)
            return None


async def _relay(report: ProgressSink | None, update: ProgressUpdate) -> None:
    if report is None:
        return
    try:
        await report(update)
    except anyio.get_cancelled_exc_class():
        raise
    except Exception:  # a lost progress notification must not fail the call
        log.debug("progress notification failed", exc_info=True)
