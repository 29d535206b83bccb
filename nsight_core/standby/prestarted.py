"""One pre-started judge as the server holds it, apart from the pool's choice of which to keep.

How one judge is started (``--standby``, or ``--idle`` for a job handed over at once or
later), handed its job over its home's socket, watched for its release, and retired; which
judges a GPU keeps, and when, is the pool's (pool.py, policy.py).
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
from collections.abc import Callable
from pathlib import Path

from nsight_core.plan.config import STANDBY_MARGIN_S, EngineConfig
from nsight_core.processes.launch import socket_home
from nsight_core.processes.sandbox import (
    Deadline,
    SandboxLimits,
    SandboxOutcome,
    StreamCapture,
    run_sandboxed,
)
from nsight_core.processes.seat import plan_launch
from nsight_core.protocol import (
    JUDGE_DIR,
    READY_FILE,
    RELEASE_FD_ENV,
    STANDBY_FILE,
    STANDBY_SOCKET,
    LaunchSpec,
)
from nsight_core.standby.policy import StandbyKey

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
