"""Starting a contestant before its judge has imported anything heavy.

A cold job's critical path is the contestant's start: Python, torch, CUDA (under ncu for
that backend). The judge's own imports (pydantic models, the backends, the checker) took
0.2-0.3 s before it could spawn the contestant. So the server, which has all of that loaded,
writes the contestant's exact command into the judge's home as a `LaunchPlan`; the judge's
entry point (judge/boot.py) reads it with the standard library, binds the contestant's
socket and starts it, and only then imports the judge. The plan holds no seed, no request
and no candidate code: only what the backend wraps the contestant in.

This module and what it imports (sandbox.py) are standard library only, on purpose.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from nsight_core.processes.sandbox import Deadline, SandboxLimits, SandboxOutcome, run_sandboxed
from nsight_core.processes.sandbox.env import inherited_with_prefix
from nsight_core.runtime.files import CONTESTANT_SOCKET, MAX_REPLY_BYTES

SUN_PATH_MAX = 107
"""Bytes of a Unix socket's path (sockaddr_un holds 108 with the closing NUL)."""
_SOCKET_NAME_ROOM = 16
"""Room for a socket's file name and separator in a `socket_home` (judge.sock, standby.sock)."""


def socket_home(prefix: str) -> Path:
    """A fresh private directory that a Unix socket's path fits in: in the temp directory
    when it leaves room, else in /tmp. A long TMPDIR (a test's, macOS's /var/folders/...)
    made every job fail to bind its socket ("AF_UNIX path too long")."""
    base = tempfile.gettempdir()
    room = SUN_PATH_MAX - len(prefix) - 8 - _SOCKET_NAME_ROOM  # mkdtemp adds 8 characters
    if len(os.path.join(base, "")) > room and os.access("/tmp", os.W_OK | os.X_OK):
        base = "/tmp"
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))


"""The contestant's first line: frameworks, CUDA context and timer are up; now the job."""
LAUNCH_FILE = "launch.json"
"""A judge's `LaunchPlan`, written by the server into the judge's home (standby/prestarted.py)."""
CONTESTANT_ENV_PREFIX = "NSPY_CONTESTANT_"
"""Variables the judge gets for its contestant (pipeline.jit_cache_env), prefix removed."""
IDLE_LIMIT_S = 24 * 3600.0
"""The contestant's limit before its job: its judge's own limit (set by whoever started the
judge) is what ends an idle seat; the job's limit is armed when the job arrives."""


class ContestantGone(Exception):
    """The contestant's process ended while the judge waited for it."""


class CallTimedOut(TimeoutError):
    """A call did not answer within its own limit (judge/call_limit.py)."""


@dataclass(frozen=True)
class LaunchPlan:
    """The contestant's command as the backend wraps it, and where its files go."""

    argv: list[str]
    private: str
    """The contestant's private working directory (outside the store; the judge removes it)."""
    out_dir: str
    """Where its stdout/stderr and the backend's files (ncu's report and log) are written."""
    report_path: str | None = None
    log_path: str | None = None

    def write(self, directory: Path) -> None:
        (directory / LAUNCH_FILE).write_text(json.dumps(asdict(self)), encoding="utf-8")

    @classmethod
    def read(cls, directory: Path) -> LaunchPlan | None:
        """The plan in ``directory``, or None when there is none or it is not one."""
        try:
            raw = json.loads((directory / LAUNCH_FILE).read_text(encoding="utf-8"))
            plan = cls(**raw)
        except (OSError, ValueError, TypeError):
            return None
        if not (isinstance(plan.argv, list) and all(isinstance(a, str) for a in plan.argv)):
            return None
        return plan


def peer_pid(conn: socket.socket) -> int:
    """The process at the other end of a Unix socket (SO_PEERCRED); 0 where unknown."""
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (OSError, AttributeError):
        return 0
    return int(struct.unpack("3i", creds)[0])


class Channel:
    """The judge's end of the contestant's socket, with deadlines and a line-size cap."""

    def __init__(self, path: Path) -> None:
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        self._listener.listen(1)
        self._listener.settimeout(0.2)
        self._conn: socket.socket | None = None
        self._buf = b""
        self.peer_pid = 0
        """The connected process (SO_PEERCRED; 0 where unknown): the contestant's own
        interpreter, beneath whatever wrapper (ncu) started it."""

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
                self.peer_pid = peer_pid(conn)

    def send(self, data: bytes) -> None:
        assert self._conn is not None
        try:
            self._conn.sendall(data + b"\n")
        except (BrokenPipeError, ConnectionResetError):  # ended (its limit, a crash) meanwhile
            raise ContestantGone("the contestant closed its connection") from None

    def recv_line(self, alive: Callable[[], bool], deadline: float | None = None) -> bytes:
        """The next line; raises ContestantGone when the process ends without one, and
        CallTimedOut when ``deadline`` (time.monotonic()) passes first."""
        assert self._conn is not None
        while b"\n" not in self._buf:
            if deadline is not None and time.monotonic() > deadline:
                raise CallTimedOut("no answer before the call's limit")
            if len(self._buf) > MAX_REPLY_BYTES:
                raise ValueError(f"a reply longer than {MAX_REPLY_BYTES} bytes")
            try:
                chunk = self._conn.recv(1 << 16)
            except TimeoutError:
                if not alive():
                    raise ContestantGone("the contestant ended during a call") from None
                continue
            except ConnectionResetError:
                raise ContestantGone("the contestant closed its connection") from None
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
    return inherited_with_prefix(CONTESTANT_ENV_PREFIX)


@dataclass
class Launched:
    """A contestant on its way up: its plan, socket, process and re-armable limit."""

    plan: LaunchPlan
    chan: Channel
    proc: ContestantProcess
    deadline: Deadline
    started: float
    """time.monotonic() at its spawn: a cold job's limit counts from here."""


def launch(plan: LaunchPlan) -> Launched:
    """Bind the contestant's socket in its private directory, then start it."""
    private = Path(plan.private)
    chan = Channel(private / CONTESTANT_SOCKET)
    deadline = Deadline(IDLE_LIMIT_S)
    proc = ContestantProcess(plan.argv, private, Path(plan.out_dir), deadline)
    return Launched(plan, chan, proc, deadline, time.monotonic())
