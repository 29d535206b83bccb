"""The job queue behind `profile_candidates`: one job at a time per GPU, cancellable.

Contract:

- `JobQueue.submit` asks the executor to check the request (the engine's preflight: bad
  metrics, missing ncu, no GPU; an unknown `device`) and raises `NsightCoreError` before
  anything is queued; then it registers the job in the store and starts it in the task
  group of the server's lifespan, so a job outlives the call that started it.
- Executors decide where a job runs (executors.py: `LocalExecutor` on this host's GPUs
  through devices.py's `DeviceLocks`; cluster.py's `DaskExecutor` on a Dask cluster).
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

"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

from nsight_core.errors import ErrorClass
from nsight_core.plan.config import EngineConfig
from nsight_core.plan.request_defaults import resolve_defaults
from nsight_core.protocol import ProgressEvent
from nsight_core.request import ProfileRequest
from nsight_core.results import ProfileResult
from nsight_core.rows.assemble import with_waits
from nsight_core.stages import StageUpdate
from nsight_core.store.result_store import TERMINAL, ResultStore
from nspy_mcp.progress import ProgressTracker, ProgressUpdate

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no cross-process device lock
    fcntl = None  # type: ignore[assignment]
from nspy_mcp.devices import DeviceLocks
from nspy_mcp.executors import CANCEL_GRACE_S, Executor, Job, LocalExecutor

log = logging.getLogger(__name__)


ProgressSink = Callable[[ProgressUpdate], Awaitable[None]]


class JobQueue:
    """Submits, runs, follows and cancels profile jobs; lives in the server's lifespan."""

    def __init__(
        self,
        store: ResultStore,
        task_group: anyio.abc.TaskGroup,
        executor: Executor | DeviceLocks,
        config: EngineConfig,
    ) -> None:
        self._store = store
        self._config = config
        """The server's settings: a request's default backend is what this host can run."""
        self._tg = task_group
        self._executor = (
            LocalExecutor(executor, config=config)
            if isinstance(executor, DeviceLocks)
            else executor
        )
        self._jobs: dict[str, Job] = {}
        self._token = anyio.lowlevel.current_token()

    # -- submitting and following --------------------------------------------------------

    async def submit(self, request: ProfileRequest) -> Job:
        """Fill what the request leaves out (its backend, a GPU MODE task's tests), check it,
        register it and start it; raises NsightCoreError if refused."""
        request = await anyio.to_thread.run_sync(resolve_defaults, request, self._config)
        want, admitted = await self._executor.check(request)
        placeholder = await anyio.to_thread.run_sync(self._store.create, request)
        job = Job(
            result_id=placeholder.result_id,
            request=request,
            want=want,
            admitted=admitted,
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
