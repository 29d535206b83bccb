"""Jobs on a Dask cluster: `nspy-mcp serve --executor dask://HOST:PORT` (docs/cluster.md).

Contract:

- The server connects a Dask client to the scheduler and sends each job as one task that
  asks for one `GPU` resource (``resources={"GPU": 1}``), so a worker runs one job per GPU
  it offers. Dask, not this server, decides where and when a job starts.
- On the worker, `run_on_worker` runs the same pipeline as the local queue
  (`nsight_core.stages.run_job`: sandbox, judge, contestant) in a job directory of
  its own, pinned to the worker's first GPU (its CUDA_VISIBLE_DEVICES), and answers the
  result plus the job directory's files (capped, `MAX_FILE_BYTES` / `MAX_RETURN_BYTES`);
  the server writes them into its store, so the result reads as a local one.
- A request's files travel with the job (`cluster_files`): its workdir (the server's
  current directory when unset) and the folder of each file it names elsewhere, each up to
  `MAX_SHIP_BYTES`; a larger folder must be on a file system the workers share, at the same
  path.
- Progress and the start come back as Dask events (``Worker.log_event`` on the topic
  ``nspy-<result_id>``); cancelling sets a cluster-wide `distributed.Event`, on which the
  worker kills the job's process group.
- A worker lost mid-job (the scheduler drops it, or Dask starts the task elsewhere) is
  noted and the job runs once more on another worker; a second loss, or no worker with a
  GPU left for `NO_WORKER_WAIT_S`, ends the job as failed (`crashed`), naming the lost workers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.pipeline import check_named_files, check_trusted_apart
from nsight_core.plan.admit import Admitted
from nsight_core.plan.config import EngineConfig
from nsight_core.protocol import ProgressEvent
from nsight_core.request import ProfileRequest
from nsight_core.results import Failure, JobStatus, ProfileResult, iso, utc_now
from nsight_core.stages import run_job
from nsight_core.store.result_store import LOCK_FILE, MANIFEST_FILE, RESULT_FILE
from nspy_mcp.cluster_files import Folder, pack_request, unpack_request
from nspy_mcp.devices import GpuSlot, discover_slots, with_gpu
from nspy_mcp.executors import CANCEL_GRACE_S, Job, JobReports

log = logging.getLogger(__name__)

RESOURCE = "GPU"
"""The worker resource one job takes: start workers with ``--resources GPU=1`` (per GPU)."""

MAX_FILE_BYTES = 64 * 2**20
"""Largest job file brought back from a worker (an ncu report of many runs stays below)."""
MAX_RETURN_BYTES = 256 * 2**20
"""All of a job's files brought back, together; the rest is listed as left on the worker."""
CONNECT_TIMEOUT_S = 30.0
POLL_S = 0.5
"""How often the server looks at the job's worker and its cancel flag."""
NO_WORKER_WAIT_S = 60.0
"""After losing a worker: how long the job waits for any worker offering a GPU."""

_STORE_FILES = {RESULT_FILE, MANIFEST_FILE, LOCK_FILE}


# -- the worker side -------------------------------------------------------------------------


def _collect_files(job_dir: Path) -> tuple[dict[str, bytes], list[str]]:
    """The job directory's files by relative path, capped; and those left out."""
    files: dict[str, bytes] = {}
    left: list[str] = []
    total = 0
    for path in sorted(p for p in job_dir.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(job_dir).as_posix()
        size = path.stat().st_size
        if size > MAX_FILE_BYTES or total + size > MAX_RETURN_BYTES:
            left.append(f"{rel} ({size} bytes)")
            continue
        total += size
        files[rel] = path.read_bytes()
    return files, left


def _watch_cancel(flag: Any, cancel: threading.Event, done: threading.Event) -> None:
    """Set `cancel` when the server sets the cluster-wide event `flag` (worker thread)."""
    while not done.is_set():
        try:
            if flag.wait(timeout=POLL_S):
                cancel.set()
                return
        except Exception:  # the scheduler is gone: the job ends with the worker anyway
            if done.wait(POLL_S):
                return


def run_on_worker(payload: dict[str, Any]) -> dict[str, Any]:
    """The Dask task: one job on this worker's GPU, its result and files (worker side)."""
    from distributed import Event, get_client, get_worker

    worker = get_worker()
    result_id = str(payload["result_id"])
    topic = f"nspy-{result_id}"
    config = EngineConfig.from_env()  # this worker's host decides (its GPU, Landlock, IPC)
    slot = discover_slots(config.visible_devices)[0]
    here = {"worker": worker.address, "host": socket.gethostname(), "pid": os.getpid()}
    worker.log_event(topic, {"kind": "started", "gpu": slot.label, **here})
    request = ProfileRequest.model_validate_json(payload["request"])
    root = Path(tempfile.mkdtemp(prefix="nspy-cluster-"))
    cancel, done = threading.Event(), threading.Event()
    watcher = threading.Thread(
        target=_watch_cancel,
        args=(Event(f"nspy-cancel-{result_id}", client=get_client()), cancel, done),  # type: ignore[no-untyped-call]
        daemon=True,
    )
    watcher.start()
    try:
        folders = [Folder(**f) for f in payload.get("folders", [])]
        unpacked = unpack_request(request, folders, root / "files")

        def progress(ev: ProgressEvent) -> None:
            worker.log_event(topic, {"kind": "progress", "event": ev.model_dump(mode="json")})

        job_dir = root / "job"
        result = run_job(
            unpacked.request,
            job_dir,
            result_id=result_id,
            on_progress=progress,
            cancel=cancel,
            gpu=slot.visible,
            config=config,
        )
        result = with_gpu(result, slot)
        files, left = _collect_files(job_dir)
        return {
            "result": unpacked.relabel(result.model_dump_json()),
            "files": files,
            "left_out": left,
            "job_dir": str(job_dir),
            "gpu": slot.label,
            **here,
        }
    finally:
        done.set()
        watcher.join(POLL_S * 4)
        shutil.rmtree(root, ignore_errors=True)


# -- the server side -------------------------------------------------------------------------


@dataclass
class _Attempts:
    """What the server saw of one job's runs on workers."""

    worker: str | None = None
    """The worker running it now."""
    lost: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    lost_at: float | None = None


class DaskExecutor:
    """Runs the queue's jobs on a Dask cluster; see the module docstring."""

    def __init__(
        self, client: Any, address: str, *, no_worker_wait_s: float = NO_WORKER_WAIT_S
    ) -> None:
        self._client = client
        self.address = address
        self.no_worker_wait_s = no_worker_wait_s

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(cls, address: str, **kwargs: Any) -> AsyncIterator[DaskExecutor]:
        """A client of the scheduler at `address` for the block (the server's lifespan)."""
        try:
            from distributed import Client
        except ImportError as exc:
            raise RuntimeError(
                "the Dask executor needs the cluster extra: pip install 'nspy-mcp[cluster]'"
            ) from exc
        client = await Client(address, asynchronous=True, timeout=CONNECT_TIMEOUT_S)  # type: ignore[no-untyped-call]
        try:
            yield cls(client, address, **kwargs)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                await client.close()

    async def check(self, request: ProfileRequest) -> tuple[GpuSlot | None, Admitted | None]:
        """What this host can tell: the worker's host admits the request itself (run_job)."""
        if request.device is not None:
            raise NsightCoreError(
                ErrorClass.INVALID_REQUEST,
                f"device {request.device!r} names a GPU of one host, but this server sends "
                f"jobs to the Dask cluster at {self.address}, whose workers own one GPU each",
                "leave device unset; Dask gives each job a worker with a free GPU",
            )
        await anyio.to_thread.run_sync(check_trusted_apart, request)
        await anyio.to_thread.run_sync(check_named_files, request)
        return None, None

    async def run(self, job: Job, queue: JobReports) -> ProfileResult | None:
        from distributed import Event

        resolved, folders = await anyio.to_thread.run_sync(pack_request, job.request)
        for f in folders:
            if f.zip_b64 is None:
                queue.note(job, f"{f.path} too big to send: workers must share it at that path")
        payload = {
            "result_id": job.result_id,
            "request": resolved.model_dump_json(),
            "folders": [dataclasses.asdict(f) for f in folders],
        }
        seen = _Attempts()
        topic = f"nspy-{job.result_id}"
        cancel_flag = Event(f"nspy-cancel-{job.result_id}", client=self._client)  # type: ignore[no-untyped-call]

        async def on_event(event: tuple[float, dict[str, Any]]) -> None:
            await self._on_event(job, queue, seen, event[1])

        self._client.subscribe_topic(topic, on_event)
        future = None
        try:
            while True:
                future = self._client.submit(
                    run_on_worker,
                    payload,
                    key=f"nspy-{job.result_id}-{len(seen.lost)}",
                    resources={RESOURCE: 1},
                    pure=False,
                    retries=0,
                )
                answer = await self._follow(job, queue, seen, future, cancel_flag)
                if isinstance(answer, dict):
                    return await anyio.to_thread.run_sync(self._unpack, job, seen, answer)
                if answer == "cancelled":
                    return None if not job.started else self._cancelled(job)
                if answer.startswith("error: "):
                    why = f"the job's Dask task failed: {answer.removeprefix('error: ')}"
                    return self._ended(job, ErrorClass.CRASHED, why, "failed", hint=_TASK_HINT)
                if len(seen.lost) >= 2 or answer == "no_worker":
                    return self._lost(job, seen)
                # Dask gave up on the task after its worker died: send it once more.
        except BaseException:
            with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_GRACE_S):
                await cancel_flag.set()  # type: ignore[no-untyped-call]
                if future is not None:
                    await self._client.cancel(future)
            raise
        finally:
            self._client.unsubscribe_topic(topic)

    async def _on_event(
        self, job: Job, queue: JobReports, seen: _Attempts, msg: dict[str, Any]
    ) -> None:
        if msg.get("kind") == "progress":
            job.tracker.update(ProgressEvent.model_validate(msg["event"]))
            job.notify()  # on the event loop already: not queue.progress (a thread's way in)
            return
        if msg.get("kind") != "started":
            return
        worker = f"{msg['worker']} (host {msg['host']}, pid {msg['pid']})"
        if seen.worker is not None and seen.worker != worker and seen.worker not in seen.lost:
            self._lose(job, queue, seen, seen.worker)  # Dask moved it before we saw the loss
        seen.worker = worker
        seen.lost_at = None
        if seen.lost:
            seen.notes.append(f"retried on worker {worker} ({msg['gpu']})")
        await queue.started(job, f"Dask worker {worker}, {msg['gpu']}")

    @staticmethod
    def _lose(job: Job, queue: JobReports, seen: _Attempts, worker: str) -> None:
        seen.lost.append(worker)
        seen.lost_at = anyio.current_time()
        seen.notes.append(f"worker {worker} was lost mid-job")
        queue.note(job, f"worker {worker} was lost; retrying on another worker")
        log.warning("job %s: worker %s was lost", job.result_id, worker)

    async def _follow(
        self, job: Job, queue: JobReports, seen: _Attempts, future: Any, cancel_flag: Any
    ) -> dict[str, Any] | str:
        """The task's answer, or why there is none: 'cancelled', 'lost', 'no_worker',
        'error: ...' (the task raised: a worker without nspy-mcp, say)."""
        from distributed.scheduler import KilledWorker

        while True:
            if job.cancel.is_set():
                return await self._cancel(job, future, cancel_flag)
            if future.done():
                try:
                    got: dict[str, Any] = await future
                    return got
                except KilledWorker:
                    if seen.worker is not None and seen.worker not in seen.lost:
                        self._lose(job, queue, seen, seen.worker)
                    return "lost"
                except Exception as exc:
                    return f"error: {type(exc).__name__}: {exc}"
            why = await self._check_workers(job, queue, seen)
            if why is not None:
                await cancel_flag.set()
                await self._client.cancel(future)
                return why
            with anyio.move_on_after(POLL_S):
                await job.wait_change(job.version)

    async def _cancel(self, job: Job, future: Any, cancel_flag: Any) -> dict[str, Any] | str:
        """Stop the job: dequeue it, or have its worker kill its process group and answer."""
        await cancel_flag.set()
        if job.started:
            with anyio.move_on_after(CANCEL_GRACE_S):
                got: dict[str, Any] = await future
                return got
        await self._client.cancel(future)
        return "cancelled"

    async def _check_workers(self, job: Job, queue: JobReports, seen: _Attempts) -> str | None:
        """'lost' after a second lost worker; 'no_worker' when none with a GPU is left."""
        workers = await self._workers()
        current = seen.worker
        if current is not None and current not in seen.lost and current.split()[0] not in workers:
            self._lose(job, queue, seen, current)
        if len(seen.lost) >= 2:
            return "lost"
        stranded = seen.lost_at is not None and not any(
            res.get(RESOURCE, 0) >= 1 for res in workers.values()
        )
        if stranded and anyio.current_time() - (seen.lost_at or 0) > self.no_worker_wait_s:
            return "no_worker"
        return None

    async def _workers(self) -> dict[str, dict[str, float]]:
        """Live workers' addresses and the resources they offer."""
        try:
            info = await self._client.scheduler.identity(n_workers=-1)
        except Exception:
            return {}
        return {
            str(addr): dict(w.get("resources") or {})
            for addr, w in (info.get("workers") or {}).items()
        }

    def _unpack(self, job: Job, seen: _Attempts, answer: dict[str, Any]) -> ProfileResult:
        """The worker's result with its files in the store's job directory (thread side)."""
        result = ProfileResult.model_validate_json(answer["result"])
        remote = Path(answer["job_dir"])
        for rel, data in answer["files"].items():
            target = (job.job_dir / rel).resolve()
            if job.job_dir.resolve() not in target.parents or rel in _STORE_FILES:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        artifacts = {}
        for name, path in result.artifacts.items():
            with contextlib.suppress(ValueError):
                local = job.job_dir / Path(path).relative_to(remote)
                if local.is_file():
                    artifacts[name] = str(local)
        notes = list(seen.notes)
        if answer["left_out"]:
            notes.append("left on the worker (over the size cap): " + ", ".join(answer["left_out"]))
        prov = result.provenance
        update: dict[str, object] = {"artifacts": artifacts}
        if prov is not None:
            update["provenance"] = prov.model_copy(
                update={"host": answer["host"], "notes": [*prov.notes, *notes]}
            )
        if seen.lost:
            update["message"] = f"{result.message} (after {'; '.join(seen.notes)})"
        return result.model_copy(update=update)

    def _lost(self, job: Job, seen: _Attempts) -> ProfileResult:
        lost = " and ".join(seen.lost) or "its worker"
        if len(seen.lost) >= 2:
            why = f"lost worker {lost} mid-job (the job was retried once)"
        else:
            why = (
                f"lost worker {lost} mid-job, and no worker offering a {RESOURCE} resource "
                f"joined the cluster at {self.address} within {self.no_worker_wait_s:.0f} s"
            )
        return self._ended(job, ErrorClass.CRASHED, why, "failed", hint=_LOST_HINT)

    def _cancelled(self, job: Job) -> ProfileResult:
        why = job.cancel_reason or "cancelled"
        return self._ended(job, ErrorClass.CANCELLED, why, "cancelled")

    @staticmethod
    def _ended(
        job: Job, error: ErrorClass, why: str, status: JobStatus, *, hint: str = ""
    ) -> ProfileResult:
        failure = Failure(ErrorClass=error, Error=why, Hint=hint, Phase="job")
        return ProfileResult(
            result_id=job.result_id,
            status=status,
            message=f"{error.value}: {why}" + (f" ({hint})" if hint else ""),
            created_at=iso(utc_now()),
            finished_at=iso(utc_now()),
            error=failure,
        )


_TASK_HINT = (
    "the workers need nspy-mcp installed, the same version as this server; see the workers' logs"
)
_LOST_HINT = (
    "a worker process died or left the cluster while it ran the job (out of host memory, "
    "killed, or its host went down); look at the workers' logs, then run the job again"
)
