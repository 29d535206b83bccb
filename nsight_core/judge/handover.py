"""A judge's handover: the one way a job reaches a judge, whenever it comes.

Every request job's judge listens on its home's socket from its first instant
(judge/boot.py) and takes exactly one job there, from its parent, the server (peer-checked:
`SO_PEERCRED`). What differs is only what exists when the job comes:

- an *idle* judge has no contestant: the server writes the job's `LaunchSpec` and
  `LaunchPlan` into its home and sends the job directory; this module's thread starts the
  contestant at once, whatever the judge's main thread is still doing (imports hold the GIL
  between bytecodes only, so the thread runs within milliseconds). A job that starts cold is
  such a judge, spawned for the job and handed it at once, so a cold job's only start on its
  path is its contestant's, and the judge's own goes on beside it;
- a *pre-started* judge (``--standby``) started its contestant for its spec at its own start;
  the handover then only takes the job.

Standard library only, like launch.py: boot.py starts this before importing the judge.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nsight_core.processes.launch import Launched, LaunchPlan, launch, peer_pid
from nsight_core.runtime.files import STANDBY_SOCKET


@dataclass
class Taken:
    """A job handed over: its directory, the contestant started for it (None where the
    judge had one already), and when it came."""

    job_dir: Path
    launched: Launched | None
    received: float
    """time.monotonic() when the server's message arrived."""


class Handover:
    """Listens on HOME's socket from the start; the first job its parent hands over is
    taken (with ``launches``, its contestant started from HOME's plan) and the answer ``ok``
    sent. The job's own checks run later, in the judge, and end in the job's events."""

    def __init__(self, home: Path, *, launches: bool) -> None:
        self.home = home
        self._launches = launches
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(home / STANDBY_SOCKET))
        self._listener.listen(1)
        self._done = threading.Event()
        self.taken: Taken | None = None
        self._thread = threading.Thread(target=self._serve, name="nspy handover", daemon=True)
        self._thread.start()

    def wait(self, alive: Callable[[], bool] | None = None) -> Taken | None:
        """Until a job is taken (the judge's own time limit ends a judge nobody hands one);
        None once ``alive`` says the contestant waiting for it has ended."""
        while not self._done.wait(0.2):
            if alive is not None and not alive():
                return None
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
        launched = None
        if self._launches:
            plan = LaunchPlan.read(self.home)
            if plan is None:
                conn.sendall(b"no: no launch plan in the idle judge's home\n")
                return
            launched = launch(plan)
        self.taken = Taken(job_dir, launched, received)
        conn.sendall(b"ok\n")
