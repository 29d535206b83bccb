"""The job queue behind `profile_candidates`: one job at a time per device, cancellable.

Contract:

- `JobQueue.submit` runs the engine's preflight (bad metrics, missing ncu, no GPU raise
  `NsightCoreError` before anything is queued), registers the job in the store and starts it
  in the task group of the server's lifespan, so a job outlives the call that started it.
- Jobs on one device key run one at a time: an `anyio.Lock` per key inside this server, and
  an ``flock`` on a per-key lock file so nspy-mcp servers in other processes of this user
  wait too. The key is ``gpu-<index>`` when a GPU is visible, else ``cpu`` (events jobs).
- The engine (`nsight_core.pipeline.run_profile_job`) is synchronous; it runs in a worker
  thread and is stopped only through its ``cancel`` event, on which it kills the job's
  process group. A job's store record ends as done, failed or cancelled in every case,
  including cancellation of the task itself.
- `JobQueue.wait` waits up to ``wait_s`` while relaying progress; if the waiting call is
  cancelled (client cancel or client timeout) and it owns the job, the job is cancelled and
  the call waits, shielded and bounded, until the process group is gone.
- `JobQueue.cancel_and_wait` (read_results with cancel=true) cancels a job on request and
  waits, bounded, until its store record is final.
- A finished job none of whose candidates passed (import or check failed for all of them)
  is recorded 'failed', with a message that says so first: the reference's rows alone must
  not read as a success.
- `JobQueue.shutdown` (lifespan exit) cancels every unfinished job.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import tempfile
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import anyio
import anyio.abc
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

from nsight_core.errors import ErrorClass
from nsight_core.pipeline import preflight, run_profile_job
from nsight_core.protocol import ProgressEvent
from nsight_core.request import ProfileRequest
from nsight_core.results import ProfileResult
from nsight_core.store import TERMINAL, ResultStore
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

LOCK_DIR_ENV = "NSPY_MCP_LOCK_DIR"

ProgressSink = Callable[[ProgressUpdate], Awaitable[None]]


@cache
def _visible_gpu() -> str | None:
    """Index (as CUDA_VISIBLE_DEVICES names it) of the GPU jobs will use, or None."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None and cvd.strip() in {"", "-1"}:
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            count = int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no library: no GPU for us
        return None
    if count == 0:
        return None
    return (cvd or "0").split(",")[0].strip() or "0"


def device_key(request: ProfileRequest) -> str:
    """Which lock a job takes: the GPU it would run on, or 'cpu' on a host without one."""
    del request  # every backend uses the first visible GPU when there is one
    gpu = _visible_gpu()
    return "cpu" if gpu is None else f"gpu-{re.sub(r'[^A-Za-z0-9_-]', '_', gpu)}"


def _lock_dir() -> Path:
    env = os.environ.get(LOCK_DIR_ENV, "").strip()
    if env:
        return Path(env)
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"nspy-mcp-{uid}"


class DeviceLocks:
    """One job at a time per device key, within this process and across processes."""

    def __init__(self, lock_dir: Path | None = None) -> None:
        self._dir = lock_dir
        self._locks: dict[str, anyio.Lock] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str, on_wait: Callable[[str], None]) -> AsyncIterator[None]:
        lock = self._locks.setdefault(key, anyio.Lock())
        if lock.locked():
            on_wait(f"queued: another job of this server is using {key}")
        async with lock:
            fd = await self._flock(key, on_wait)
            try:
                yield
            finally:
                if fd is not None:
                    os.close(fd)  # drops the flock

    async def _flock(self, key: str, on_wait: Callable[[str], None]) -> int | None:
        if fcntl is None:  # pragma: no cover
            return None
        directory = self._dir or _lock_dir()
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(directory / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        told = False
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return fd
                except BlockingIOError:
                    if not told:
                        on_wait(f"queued: another nspy-mcp process is using {key}")
                        told = True
                    await anyio.sleep(CROSS_PROCESS_POLL_S)
        except BaseException:
            os.close(fd)
            raise


@dataclass(eq=False)
class Job:
    """One submitted profile job and what waiters need to follow it."""

    result_id: str
    request: ProfileRequest
    device: str
    job_dir: Path
    tracker: ProgressTracker
    cancel: threading.Event = field(default_factory=threading.Event)
    finished: anyio.Event = field(default_factory=anyio.Event)
    thread_exited: threading.Event = field(default_factory=threading.Event)
    queue_scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    started: bool = False
    result: ProfileResult | None = None
    cancel_reason: str | None = None
    version: int = 0
    _changed: anyio.Event = field(default_factory=anyio.Event)

    def notify(self) -> None:
        """Wake every waiter (call on the event loop)."""
        self.version += 1
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    async def wait_change(self, seen: int) -> None:
        if self.version == seen:
            await self._changed.wait()


class JobQueue:
    """Submits, runs, follows and cancels profile jobs; lives in the server's lifespan."""

    def __init__(
        self, store: ResultStore, task_group: anyio.abc.TaskGroup, locks: DeviceLocks
    ) -> None:
        self._store = store
        self._tg = task_group
        self._locks = locks
        self._jobs: dict[str, Job] = {}
        self._token = anyio.lowlevel.current_token()

    # -- submitting and following --------------------------------------------------------

    async def submit(self, request: ProfileRequest) -> Job:
        """Check the request, register it and start it; raises NsightCoreError if refused."""
        await anyio.to_thread.run_sync(preflight, request)
        device = await anyio.to_thread.run_sync(device_key, request)  # NVML, once per process
        placeholder = await anyio.to_thread.run_sync(self._store.create, request)
        job = Job(
            result_id=placeholder.result_id,
            request=request,
            device=device,
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
        if job.started:
            status = "running"
            state = f"running: {latest.progress:.0f} %, {latest.message}"
        else:
            status = "queued"
            ahead = sum(
                1
                for other in self._jobs.values()
                if other.device == job.device
                and other is not job
                and other.result_id < job.result_id
            )
            state = f"queued behind {ahead} job(s) on {job.device}" if ahead else latest.message
        message = (
            f"{state}; call read_results with result_id={job.result_id} "
            f"({latest.eta_text()}); pass wait_s to wait for it there"
        )
        created = self._store.summary(job.result_id).created_at
        return ProfileResult(
            result_id=job.result_id, status=status, message=message, created_at=created
        )

    def cancel(self, job: Job, reason: str) -> None:
        """Ask the job to stop: dequeue it, or kill its process group (call on the loop)."""
        if job.finished.is_set():
            return
        if job.cancel_reason is None:
            job.cancel_reason = reason
        job.cancel.set()
        job.queue_scope.cancel()

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
        async with contextlib.AsyncExitStack() as stack:
            # Only the wait for the device is cancelled through `queue_scope`; a started
            # job is stopped through its cancel event, so the engine can kill its group.
            with job.queue_scope:
                await stack.enter_async_context(
                    self._locks.hold(job.device, lambda m: self._note(job, m))
                )
            if job.queue_scope.cancelled_caught or job.cancel.is_set():
                return await self._cancelled_before_start(job)
            job.started = True
            self._note(job, "started")
            note = (
                f"running on {job.device} in nspy-mcp server pid {os.getpid()}; call "
                f"read_results with result_id={job.result_id} to follow it"
            )
            await anyio.to_thread.run_sync(self._store.mark_running, job.result_id, note)
            result = await self._call_engine(job)
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

    async def _call_engine(self, job: Job) -> ProfileResult:
        def engine() -> ProfileResult:
            try:
                return run_profile_job(
                    job.request,
                    job.job_dir,
                    result_id=job.result_id,
                    on_progress=lambda ev: self._progress(job, ev),
                    cancel=job.cancel,
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

    def _normalize(self, job: Job, result: ProfileResult) -> ProfileResult:
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

    # -- progress (engine thread -> event loop) ------------------------------------------

    def _progress(self, job: Job, ev: ProgressEvent) -> None:
        job.tracker.update(ev)
        with contextlib.suppress(Exception):  # the loop may be gone at shutdown
            anyio.from_thread.run_sync(job.notify, token=self._token)

    def _note(self, job: Job, message: str) -> None:
        job.tracker.note(message)
        job.notify()


async def _relay(report: ProgressSink | None, update: ProgressUpdate) -> None:
    if report is None:
        return
    try:
        await report(update)
    except anyio.get_cancelled_exc_class():
        raise
    except Exception:  # a lost progress notification must not fail the call
        log.debug("progress notification failed", exc_info=True)
