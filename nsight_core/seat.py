"""The judge's side of a contestant: its process, socket, slots and private directory.

A `Seat` is made before the judge knows its job: the contestant process is started
(wrapped by the backend: under ncu for that backend) and imports the frameworks and creates
its CUDA context while it waits for a `ContestantJob` on its socket. Only what shapes the
contestant's command (`StandbySpec`) is needed that early, so a pre-started judge
(standby.py) and a judge started for a known job go through the same steps; the job, its
seed and its code come later, and the reference still runs before any candidate exists.

The contestant's files (its stdout/stderr, ncu's report and log) are written into the
seat's ``out_dir``; `Seat.move_artifacts` puts them into the job's directory at the end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from nsight_core.collectors import get_backend
from nsight_core.collectors.base import Backend, Wrapped
from nsight_core.exchange import Arena
from nsight_core.protocol import (
    CONTESTANT_SOCKET,
    JOB_ARTIFACTS,
    JUDGE_DIR,
    MAX_REPLY_BYTES,
    READY_LINE,
    StandbySpec,
)
from nsight_core.sandbox import Deadline, SandboxLimits, SandboxOutcome, run_sandboxed
from nsight_core.settings import JobSettings

CONTESTANT_ENV_PREFIX = "NSPY_CONTESTANT_"
"""Variables the judge gets for its contestant (pipeline.jit_cache_env), prefix removed."""

IDLE_LIMIT_S = 24 * 3600.0
"""The contestant's limit before its job: its judge's own limit (set by whoever started the
judge) is what ends an idle seat; the job's limit is armed when the job arrives."""


class ContestantGone(Exception):
    """The contestant's process ended while the judge waited for it."""


class Channel:
    """The judge's end of the contestant's socket, with deadlines and a line-size cap."""

    def __init__(self, path: Path) -> None:
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        self._listener.listen(1)
        self._listener.settimeout(0.2)
        self._conn: socket.socket | None = None
        self._buf = b""

    def accept(self, alive: Callable[[], bool], deadline: float) -> None:
        while self._conn is None:
            if not alive():
                raise ContestantGone("the contestant ended before it connected")
            if time.monotonic() > deadline:
                raise TimeoutError("the contestant did not connect in time")
            with contextlib.suppress(TimeoutError):
                conn, _ = self._listener.accept()
                conn.settimeout(0.2)
                self._conn = conn

    def send(self, data: bytes) -> None:
        assert self._conn is not None
        self._conn.sendall(data + b"\n")

    def recv_line(self, alive: Callable[[], bool]) -> bytes:
        """The next line; raises ContestantGone when the process ends without one."""
        assert self._conn is not None
        while b"\n" not in self._buf:
            if len(self._buf) > MAX_REPLY_BYTES:
                raise ValueError(f"a reply longer than {MAX_REPLY_BYTES} bytes")
            try:
                chunk = self._conn.recv(1 << 16)
            except TimeoutError:
                if not alive():
                    raise ContestantGone("the contestant ended during a call") from None
                continue
            if not chunk:
                raise ContestantGone("the contestant closed its connection")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def close(self) -> None:
        for s in (self._conn, self._listener):
            if s is not None:
                with contextlib.suppress(OSError):
                    s.close()


class ContestantProcess:
    """The contestant, run to its end by sandbox.py in a thread of the judge."""

    def __init__(self, argv: list[str], cwd: Path, output_dir: Path, deadline: Deadline) -> None:
        self.outcome: SandboxOutcome | None = None
        self.cancel = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(argv, cwd, output_dir, deadline), daemon=True
        )
        self._thread.start()

    def _run(self, argv: list[str], cwd: Path, output_dir: Path, deadline: Deadline) -> None:
        self.outcome = run_sandboxed(
            argv,
            cwd=cwd,
            limits=SandboxLimits(wall_s=deadline.limit_s),
            deadline=deadline,
            env=contestant_env(),
            cancel=self.cancel,
            output_dir=output_dir,
        )

    def alive(self) -> bool:
        return self._thread.is_alive()

    def wait(self, timeout: float) -> SandboxOutcome | None:
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.cancel.set()
            self._thread.join()
        return self.outcome


def contestant_env() -> dict[str, str]:
    """The contestant's own settings the pipeline handed the judge (``NSPY_CONTESTANT_X``
    becomes ``X``): its JIT caches, which are not the judge's."""
    n = len(CONTESTANT_ENV_PREFIX)
    return {k[n:]: v for k, v in os.environ.items() if k.startswith(CONTESTANT_ENV_PREFIX)}


class Seat:
    """A contestant started for a `StandbySpec`, waiting for its job."""

    def __init__(self, spec: StandbySpec, out_dir: Path, *, prestarted: bool = False) -> None:
        self.spec = spec
        self.out_dir = out_dir
        self.backend: Backend = get_backend(spec.backend)
        self.settings: JobSettings = spec.settings()
        self.private = Path(tempfile.mkdtemp(prefix="nspy-contestant-"))
        self.arena = Arena(Path(tempfile.mkdtemp(prefix="nspy-slots-")), cuda_ipc=spec.cuda_ipc)
        self.deadline = Deadline(IDLE_LIMIT_S)
        self.chan = Channel(self.private / CONTESTANT_SOCKET)
        argv = [
            sys.executable, "-P", "-m", "nsight_core.contestant",
            str(self.private), self.backend.child_timer,
            *(["--prestarted"] if prestarted else []),
        ]  # fmt: skip
        self.wrapped: Wrapped = self.backend.wrap(argv, self.settings, out_dir)
        self.proc = ContestantProcess(self.wrapped.argv, self.private, out_dir, self.deadline)
        self.started = time.monotonic()
        # Asked now that the contestant is starting (`ncu --version` takes a moment).
        self.wrapped = dataclasses.replace(self.wrapped, tool_version=self.backend.tool_version())
        self.prestarted = prestarted
        self.ready = False

    def arm(self, limit_s: float) -> None:
        """The job's time limit for the contestant: from its spawn for a job known at start
        (its start-up counts, as it always did), from now for a pre-started one (its
        start-up happened before the job existed)."""
        spent = 0.0 if self.prestarted else time.monotonic() - self.started
        self.deadline.arm(max(limit_s - spent, 0.001))

    def wait_ready(self, timeout_s: float) -> None:
        """Until the contestant says it has started (raises ContestantGone or TimeoutError)."""
        if self.ready:
            return
        self.chan.accept(self.proc.alive, time.monotonic() + timeout_s)
        line = self.chan.recv_line(self.proc.alive)
        if line != READY_LINE:
            raise ValueError("the contestant's first line was not its start-up notice")
        self.ready = True

    def move_artifacts(self, job_dir: Path) -> Wrapped:
        """Put the contestant's files into ``job_dir`` (a no-op when they were written
        there); the command as it was run, with its files' new paths."""
        if self.out_dir.resolve() == job_dir.resolve():
            return self.wrapped
        for name in JOB_ARTIFACTS.values():
            src = self.out_dir / name
            if not name.startswith(f"{JUDGE_DIR}/") and src.is_file():
                shutil.move(str(src), str(job_dir / name))
        w = self.wrapped
        return Wrapped(
            w.argv,
            w.tool_version,
            job_dir / w.report_path.name if w.report_path is not None else None,
            job_dir / w.log_path.name if w.log_path is not None else None,
        )

    def close(self) -> None:
        self.chan.close()
        self.arena.close()
        shutil.rmtree(self.private, ignore_errors=True)
