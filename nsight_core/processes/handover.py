"""An idle judge's handover: the job arrives while the judge may still be starting.

A fresh server knows no job's settings, and under ncu the contestant's settings are fixed at
its launch, so nothing of a contestant can start before the first request. The judge needs
no settings to start: an idle judge (judge/boot.py ``--idle``) imports itself and torch,
makes its CUDA context and warms its checking path before any request, and waits here. The
server writes the job's `LaunchSpec` and `LaunchPlan` into the judge's home and sends the
job directory on its socket; a thread of this module takes it and starts the contestant at
once, whatever the judge's main thread is still doing (the imports hold the GIL between
bytecodes only, so the thread runs within milliseconds). The contestant's start is then the
job's only start on its path: the judge's own was done before, or goes on beside it.

Standard library only, like launch.py: boot.py starts this before importing the judge.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from nsight_core.processes.launch import Launched, LaunchPlan, launch, peer_pid
from nsight_core.runtime.files import STANDBY_SOCKET


@dataclass
class Taken:
    """A job handed over: its directory, the contestant started for it, and when it came."""

    job_dir: Path
    launched: Launched
    received: float
    """time.monotonic() when the server's message arrived."""


class Handover:
    """Listens on HOME's socket from the start; the first job its parent hands over is
    taken, its contestant started, and the answer ``ok`` sent (the job's own checks run
    later, in the judge, and end in the job's events like a cold judge's)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(home / STANDBY_SOCKET))
        self._listener.listen(1)
        self._done = threading.Event()
        self.taken: Taken | None = None
        self._thread = threading.Thread(target=self._serve, name="nspy handover", daemon=True)
        self._thread.start()

    def wait(self) -> Taken:
        """Until a job is taken (the judge's own time limit ends an idle judge)."""
        self._done.wait()
        assert self.taken is not None
        return self.taken

    def _serve(self) -> None:
        while self.taken is None:
            conn, _ = self._listener.accept()
            with conn:
                # Only the server that started this judge may hand it a job: the socket's
                # path can be found in /proc, and a job's reference runs here, unconfined.
                if peer_pid(conn) != os.getppid():
                    continue
                conn.settimeout(10.0)
                with contextlib.suppress(OSError, UnicodeDecodeError, ValueError):
                    self._take(conn)
        self._listener.close()
        self._done.set()

    def _take(self, conn: socket.socket) -> None:
        line = conn.makefile("rb").readline(4096).strip()
        received = time.monotonic()
        job_dir = Path(line.decode()).resolve()
        plan = LaunchPlan.read(self.home)
        if plan is None:
            conn.sendall(b"no: no launch plan in the idle judge's home\n")
            return
        launched = launch(plan)
        self.taken = Taken(job_dir, launched, received)
        conn.sendall(b"ok\n")
