"""ResultStore: durable profile results, one directory per result plus an SQLite index.

Contract:

- Layout under the root: ``index.sqlite3`` (what is listed and filtered) and one directory per
  result, named by its id, holding ``manifest.json`` (request, status, times, provenance),
  ``result.json`` (the whole `ProfileResult`, rows with raw per-run values) and whatever the
  engine writes into its job directory (``events.jsonl`` raw runs, ``report.ncu-rep``, logs).
- Every file the store writes is written whole to a temporary name and moved into place with
  ``os.replace``, so a reader never sees half a file and a crash leaves the old one.
- ``result.json`` is the truth for a result's content; the index is derived from it and is
  rebuilt from the directories when it is lost or unreadable.
- A result read back is checked against ProfileResult's JSON Schema, the schema the MCP
  server publishes; a file that fails is reported as `CorruptResultError` naming the file
  and the first violation, never returned half-valid.
- Ids match `RESULT_ID_PATTERN` before they touch the file system: no '..', no '/', nothing
  but the store's own ids.
- A queued or running job holds an exclusive ``flock`` on its ``.owner.lock`` until it is
  finished. When a store opens, a queued or running result whose lock it can take was cut off
  by a crash: it is marked failed (``crashed``) with a reason. A job of another live server
  on the same root keeps its lock and is left alone.
- A done job is judged against its lineage's best so far, kept in ``best/`` (store.best):
  the result's ``best_so_far``; its sources are hashed when it is queued (store.lineage).
- Retention (`Retention`): after each finished job, and at open, the oldest finished results
  beyond ``max_results`` or older than ``max_age_days`` are deleted. Queued and running
  results are never pruned.

This module is the store object: the index, owner locks, recovery and pruning. A result's
on-disk form (ids, file names, atomic writes, the schema check) is `store.files`; what a
listing shows, and the index's search, is `store.listing`; the retention limits and which
results they let go, `store.retention`. ``__all__`` keeps the names callers import from
here.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import sqlite3
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import platformdirs

from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.plan.config import EngineConfig
from nsight_core.protocol import JOB_ARTIFACTS
from nsight_core.request import ProfileRequest
from nsight_core.results import Failure, JobStatus, ProfileResult, iso, utc_now
from nsight_core.store.best import with_best_so_far
from nsight_core.store.files import (
    INDEX_FILE,
    LOCK_FILE,
    MANIFEST_FILE,
    RESULT_FILE,
    RESULT_ID_LEN,
    RESULT_ID_PATTERN,
    CorruptResultError,
    new_result_id,
    result_validator,
    validate_result_id,
    warm_result_validator,
    write_atomic,
)
from nsight_core.store.lineage import Sources, sources_of
from nsight_core.store.listing import (
    ResultFilter,
    ResultPage,
    ResultSummary,
    index_keys,
    query_page,
    summary_of,
)
from nsight_core.store.manifest import result_manifest
from nsight_core.store.retention import Retention, beyond_limits

__all__ = [
    "INDEX_FILE",
    "LOCK_FILE",
    "MANIFEST_FILE",
    "RESULT_FILE",
    "RESULT_ID_PATTERN",
    "TERMINAL",
    "CorruptResultError",
    "ResultFilter",
    "ResultPage",
    "ResultStore",
    "ResultSummary",
    "Retention",
    "default_store_root",
    "validate_result_id",
    "warm_result_validator",
    "write_atomic",
]

try:  # POSIX: owner locks; elsewhere a cut-off job is only detected by its owner's pid.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)


_ENGINE_FILES = JOB_ARTIFACTS

TERMINAL: frozenset[str] = frozenset({"done", "failed", "cancelled"})

_SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS results (
    result_id   TEXT PRIMARY KEY,
    status      TEXT NOT NULL,
    created_ts  REAL NOT NULL,
    summary     TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS result_keys (
    result_id   TEXT NOT NULL REFERENCES results(result_id) ON DELETE CASCADE,
    annotation  TEXT NOT NULL,
    config_id   INTEGER NOT NULL,
    metric      TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS result_keys_by_id ON result_keys(result_id);
CREATE INDEX IF NOT EXISTS results_by_status ON results(status);
"""


def default_store_root(config: EngineConfig | None = None) -> Path:
    """The configured root (NSPY_MCP_STORE), else the user data dir's ``nspy-mcp/results``."""
    if config is not None and config.store_root is not None:
        return config.store_root
    return Path(platformdirs.user_data_dir("nspy-mcp", appauthor=False)) / "results"


class ResultStore:
    """Durable results under one root; safe to share between threads and server processes."""

    def __init__(self, root: str | Path | None = None, *, retention: Retention | None = None):
        self.root = Path(root).expanduser() if root is not None else default_store_root()
        self.retention = retention if retention is not None else Retention()
        self.root.mkdir(parents=True, exist_ok=True)
        self._index = self.root / INDEX_FILE
        self._locks: dict[str, int] = {}
        self._sources: dict[str, Sources] = {}  # hashed when queued, judged when done
        self._open_index()
        self.recovered: list[str] = self.recover_interrupted()
        self.prune()

    def close(self) -> None:
        """Drop the owner locks of jobs still queued or running (they count as cut off)."""
        for result_id in list(self._locks):
            os.close(self._locks.pop(result_id))

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- paths -------------------------------------------------------------------------

    def result_dir(self, result_id: str) -> Path:
        """The result's directory; also the job directory handed to the engine."""
        return self.root / validate_result_id(result_id)

    # -- writing -----------------------------------------------------------------------

    def create(self, request: ProfileRequest) -> ProfileResult:
        """Register a new queued job and return its placeholder result."""
        now = utc_now()
        result_id = new_result_id(now)
        rdir = self.root / result_id
        rdir.mkdir()
        self._take_owner_lock(result_id)
        self._sources[result_id] = sources_of(request)
        placeholder = ProfileResult(
            result_id=result_id,
            status="queued",
            message=f"queued; call read_results with result_id={result_id} to follow it",
            created_at=iso(now),
        )
        self._write_files(placeholder, request)
        self._upsert(placeholder, request, now.timestamp())
        return placeholder

    def mark_running(self, result_id: str, message: str = "running") -> ProfileResult:
        current = self.load(result_id)
        if current.status in TERMINAL:
            return current
        running = current.model_copy(update={"status": "running", "message": message})
        request = self.load_request(result_id)
        self._write_files(running, request)
        self._upsert(running, request, _parse_ts(running.created_at))
        return running

    def finish(self, result: ProfileResult) -> ProfileResult:
        """Store a job's final result (done, failed or cancelled) and release its lock."""
        if result.status not in TERMINAL:
            raise ValueError(f"finish() needs a terminal status, not {result.status!r}")
        result_id = validate_result_id(result.result_id)
        request = self.load_request(result_id)
        created_at = self._created_at(result_id) or result.created_at
        final = result.model_copy(
            update={
                "created_at": created_at,
                "finished_at": result.finished_at or iso(utc_now()),
                "artifacts": self._artifacts(result_id, result.artifacts),
            }
        )
        final = with_best_so_far(self.root, request, final, self._sources.pop(result_id, None))
        self._write_files(final, request)
        self._upsert(final, request, _parse_ts(created_at))
        self._release_owner_lock(result_id)
        self.prune()
        return final

    def fail(
        self,
        result_id: str,
        error_class: ErrorClass,
        message: str,
        *,
        hint: str = "",
        status: JobStatus = "failed",
    ) -> ProfileResult:
        """Finish a job that produced no result of its own (crash, cancel before start)."""
        current = self.load(result_id)
        failure = Failure(ErrorClass=error_class, Error=message, Hint=hint, Phase="job")
        text = f"{error_class.value}: {message}" + (f" ({hint})" if hint else "")
        return self.finish(
            current.model_copy(
                update={"status": status, "error": failure, "message": text, "finished_at": None}
            )
        )

    def _write_files(self, result: ProfileResult, request: ProfileRequest) -> None:
        rdir = self.root / result.result_id
        write_atomic(rdir / RESULT_FILE, result.model_dump_json(indent=1))
        manifest = {
            **result_manifest(result, request),
            "owner": {"host": socket.gethostname(), "pid": os.getpid()},
        }
        write_atomic(rdir / MANIFEST_FILE, json.dumps(manifest, indent=1))

    def _artifacts(self, result_id: str, engine: dict[str, str]) -> dict[str, str]:
        rdir = self.root / result_id
        found = {
            "result_dir": str(rdir),
            "manifest": str(rdir / MANIFEST_FILE),
            "result": str(rdir / RESULT_FILE),
        }
        for key, name in _ENGINE_FILES.items():
            if (rdir / name).is_file():
                found[key] = str(rdir / name)
        return {**found, **engine}

    # -- reading -----------------------------------------------------------------------

    def load(self, result_id: str) -> ProfileResult:
        """The stored result, checked against ProfileResult's JSON Schema."""
        rdir = self.result_dir(result_id)
        path = rdir / RESULT_FILE
        if not rdir.is_dir():
            raise NsightCoreError(
                ErrorClass.INVALID_REQUEST,
                f"no result with id {result_id} in the store at {self.root}",
                "call read_results without result_id to list the stored results "
                "(it may have been pruned by the retention limit)",
            )
        data = self._read_json(result_id, path)
        errors = sorted(result_validator().iter_errors(data), key=lambda e: list(e.path))
        if errors:
            first = errors[0]
            raise CorruptResultError(
                result_id,
                path,
                f"{first.json_path}: {first.message} ({len(errors)} schema violation(s))",
            )
        result = ProfileResult.model_validate(data)
        if result.result_id != result_id:
            raise CorruptResultError(result_id, path, f"holds result_id {result.result_id!r}")
        return result

    def load_request(self, result_id: str) -> ProfileRequest:
        path = self.result_dir(result_id) / MANIFEST_FILE
        data = self._read_json(result_id, path)
        try:
            return ProfileRequest.model_validate(data["request"])
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptResultError(result_id, path, f"no valid request: {exc}") from exc

    def _read_json(self, result_id: str, path: Path) -> Any:
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise CorruptResultError(result_id, path, "file is missing") from exc
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptResultError(result_id, path, f"not readable JSON: {exc}") from exc

    def summary(self, result_id: str) -> ResultSummary:
        with self._db() as db:
            row = db.execute(
                "SELECT summary FROM results WHERE result_id = ?", (validate_result_id(result_id),)
            ).fetchone()
        if row is None:
            self.load(result_id)  # raises the not-found error
            raise CorruptResultError(result_id, self._index, "result is missing from the index")
        return ResultSummary.model_validate_json(row[0])

    def query(
        self, filt: ResultFilter | None = None, *, limit: int = 20, cursor: str | None = None
    ) -> ResultPage:
        """Results matching `filt`, newest first; `cursor` is a page's `next_cursor`."""
        return query_page(self._db, filt, limit=limit, cursor=cursor)

    # -- index -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        # One short-lived connection per operation: no connection is shared between
        # threads, and nothing is left open for the garbage collector to find.
        conn = sqlite3.connect(self._index, timeout=30.0)
        try:
            conn.execute("PRAGMA foreign_keys = ON")
            with conn:
                yield conn
        finally:
            conn.close()

    def _open_index(self) -> None:
        try:
            with self._db() as db:
                db.execute("PRAGMA journal_mode = WAL")
                db.executescript(_SCHEMA_SQL)
                empty = db.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 0
        except sqlite3.DatabaseError as exc:
            broken = self._index.with_name(f"{INDEX_FILE}.broken-{int(time.time())}")
            log.warning("result index %s unreadable (%s); moved to %s", self._index, exc, broken)
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.replace(f"{self._index}{suffix}", f"{broken}{suffix}")
            with self._db() as db:
                db.execute("PRAGMA journal_mode = WAL")
                db.executescript(_SCHEMA_SQL)
            empty = True
        if empty:
            self._reindex()

    def _reindex(self) -> None:
        """Rebuild the index from the result directories (the index is derived data)."""
        for rdir in sorted(self.root.iterdir()):
            if not rdir.is_dir() or len(rdir.name) != RESULT_ID_LEN:
                continue
            try:
                validate_result_id(rdir.name)
                result = self.load(rdir.name)
                request = self.load_request(rdir.name)
            except (NsightCoreError, CorruptResultError) as exc:
                log.warning("not indexing %s: %s", rdir, exc)
                continue
            self._upsert(result, request, _parse_ts(result.created_at))

    def _upsert(self, result: ProfileResult, request: ProfileRequest, created_ts: float) -> None:
        summary = summary_of(result, request)
        keys = index_keys(result, request)
        with self._db() as db:
            db.execute(
                "INSERT INTO results (result_id, status, created_ts, summary) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(result_id) DO UPDATE SET status = excluded.status, "
                "summary = excluded.summary",
                (result.result_id, result.status, created_ts, summary.model_dump_json()),
            )
            db.execute("DELETE FROM result_keys WHERE result_id = ?", (result.result_id,))
            db.executemany(
                "INSERT INTO result_keys (result_id, annotation, config_id, metric) "
                "VALUES (?, ?, ?, ?)",
                [(result.result_id, *k) for k in keys],
            )

    def _created_at(self, result_id: str) -> str | None:
        with self._db() as db:
            row = db.execute(
                "SELECT summary FROM results WHERE result_id = ?", (result_id,)
            ).fetchone()
        return None if row is None else ResultSummary.model_validate_json(row[0]).created_at

    # -- owners, crashes, retention ----------------------------------------------------

    def _take_owner_lock(self, result_id: str) -> None:
        if fcntl is None:  # pragma: no cover - Windows
            return
        # A raw descriptor, not a file object: held for the job's life, it must not be
        # closed (and the lock dropped) by the garbage collector while the job runs.
        fd = os.open(self.root / result_id / LOCK_FILE, os.O_WRONLY | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._locks[result_id] = fd

    def _release_owner_lock(self, result_id: str) -> None:
        fd = self._locks.pop(result_id, None)
        if fd is not None:
            os.close(fd)  # closing the descriptor drops the flock
        with contextlib.suppress(FileNotFoundError):
            (self.root / result_id / LOCK_FILE).unlink()

    def _owner_is_gone(self, result_id: str) -> bool:
        if result_id in self._locks:
            return False
        path = self.root / result_id / LOCK_FILE
        if fcntl is None:  # pragma: no cover - Windows: trust the manifest's pid
            return True
        try:
            fh = path.open("rb")
        except FileNotFoundError:
            return True
        with fh:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # a live process (maybe another server) still runs it
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
            return True

    def recover_interrupted(self) -> list[str]:
        """Mark queued/running results whose owner is gone as failed; return their ids."""
        with self._db() as db:
            ids = [
                r[0]
                for r in db.execute(
                    "SELECT result_id FROM results WHERE status IN ('queued', 'running')"
                )
            ]
        recovered = []
        for result_id in ids:
            if not self._owner_is_gone(result_id):
                continue
            try:
                stored = self.load(result_id)
            except (NsightCoreError, CorruptResultError) as exc:
                log.warning("dropping unreadable interrupted result %s: %s", result_id, exc)
                with self._db() as db:
                    db.execute("DELETE FROM results WHERE result_id = ?", (result_id,))
                continue
            if stored.status in TERMINAL:  # finished, but the index missed it
                self._upsert(stored, self.load_request(result_id), _parse_ts(stored.created_at))
                continue
            was = stored.status
            self.fail(
                result_id,
                ErrorClass.CRASHED,
                f"the server that owned this job stopped while it was {was} "
                "(crash, kill or power loss); nothing more was measured",
                hint="run profile_candidates again with the same request",
            )
            recovered.append(result_id)
        return recovered

    def prune(self) -> list[str]:
        """Delete the oldest finished results beyond the retention limits; return their ids."""
        with self._db() as db:
            doomed = beyond_limits(db, self.retention)
            db.executemany("DELETE FROM result_keys WHERE result_id = ?", [(d,) for d in doomed])
            db.executemany("DELETE FROM results WHERE result_id = ?", [(d,) for d in doomed])
        for result_id in doomed:
            shutil.rmtree(self.root / result_id, ignore_errors=True)
        return doomed


def _parse_ts(created_at: str) -> float:
    try:
        return datetime.fromisoformat(created_at).timestamp()
    except ValueError:
        return 0.0
