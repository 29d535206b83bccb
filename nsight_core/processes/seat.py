"""The judge's side of a contestant: its process, socket, slots and private directory.

A `Seat` is made before the judge knows its job: the contestant process is started
(wrapped by the backend: under ncu for that backend) and imports the frameworks and creates
its CUDA context while it waits for a `ContestantJob` on its socket. Only what shapes the
contestant's command (`LaunchSpec`) is needed that early, so a pre-started judge
(standby.py) and a judge started for a known job go through the same steps; the job, its
seed and its code come later, and the reference still runs before any candidate exists.

The contestant's files (its stdout/stderr, ncu's report and log) are written into the
seat's ``out_dir``; `Seat.move_artifacts` puts them into the job's directory at the end.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from nsight_core.collectors import get_backend
from nsight_core.collectors.base import Backend, Wrapped
from nsight_core.plan.config import EngineConfig
from nsight_core.processes.launch import Launched, LaunchPlan, launch, socket_home
from nsight_core.protocol import JOB_ARTIFACTS, JUDGE_DIR, LaunchSpec
from nsight_core.runtime.exchange import Arena
from nsight_core.runtime.files import READY_LINE


def plan_launch(
    spec: LaunchSpec, out_dir: Path, config: EngineConfig, *, prestarted: bool = False
) -> LaunchPlan:
    """The contestant's command for ``spec`` as its backend wraps it (with ``config``'s
    tools), in a fresh private directory; made by the server for every judge (judge/boot.py
    starts it), or by the judge when the server's plan could not be read."""
    backend = get_backend(spec.backend)
    private = socket_home("nspy-contestant-")
    argv = [
        sys.executable, "-P", "-m", "nsight_core.contestant",
        str(private), backend.child_timer, *(["--prestarted"] if prestarted else []),
    ]  # fmt: skip
    wrapped = backend.wrap(argv, spec, out_dir, config)
    return LaunchPlan(
        argv=list(wrapped.argv),
        private=str(private),
        out_dir=str(out_dir),
        report_path=str(wrapped.report_path) if wrapped.report_path else None,
        log_path=str(wrapped.log_path) if wrapped.log_path else None,
    )


class Seat:
    """A contestant started for a `LaunchSpec`, waiting for its job."""

    def __init__(
        self,
        spec: LaunchSpec,
        out_dir: Path,
        config: EngineConfig,
        *,
        prestarted: bool = False,
        launched: Launched | None = None,
    ) -> None:
        """Start the contestant for ``spec`` (wrapped with ``config``'s tools), or adopt
        ``launched``: one that judge_boot.py started from the server's `plan_launch` for this
        same spec and directory."""
        self.spec = spec
        self.out_dir = out_dir
        self.backend: Backend = get_backend(spec.backend)
        if launched is None:
            launched = launch(plan_launch(spec, out_dir, config, prestarted=prestarted))
        plan = launched.plan
        self.private = Path(plan.private)
        self.arena = Arena(Path(tempfile.mkdtemp(prefix="nspy-slots-")), cuda_ipc=spec.cuda_ipc)
        self.deadline = launched.deadline
        self.chan = launched.chan
        self.proc = launched.proc
        self.started = launched.started
        # Asked now that the contestant is starting (`ncu --version` takes a moment).
        self.wrapped: Wrapped = Wrapped(
            plan.argv,
            self.backend.tool_version(plan.argv),
            Path(plan.report_path) if plan.report_path else None,
            Path(plan.log_path) if plan.log_path else None,
        )
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
        # Its own folder too: a judge outside the sandbox (no private TMPDIR) left it behind.
        shutil.rmtree(self.arena.directory, ignore_errors=True)
