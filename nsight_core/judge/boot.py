"""The judge's entry point for a cold job: start the contestant first, import the judge after.

    python -P -m nsight_core.judge.boot JOB_DIR

The server wrote the contestant's command into JOB_DIR (launch.py's `LaunchPlan`). This
module imports only the standard library and sandbox.py, so the contestant is spawned a few
hundredths of a second after this process starts; the judge's own imports, its frameworks
and its CUDA context (begun on a side thread at once: early_cuda.py) then overlap the
contestant's start instead of preceding it. Without a
plan (or with ``--standby``) it is exactly ``python -m nsight_core.judge.core``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from nsight_core.processes.launch import Launched, LaunchPlan, launch
from nsight_core.processes.sandbox import watch_parent_pipe
from nsight_core.runtime.early_cuda import EarlyCuda


def start_contestant(argv: list[str]) -> Launched | None:
    """The contestant of a cold job's plan, started; None for a standby or without a plan."""
    if len(argv) != 2:
        return None
    plan = LaunchPlan.read(Path(argv[1]).resolve())
    return launch(plan) if plan is not None else None


def main(argv: list[str]) -> int:
    watch_parent_pipe()  # first, as the judge does: die with the server, whatever kills it
    launched = start_contestant(argv)
    early = EarlyCuda()  # this process's CUDA context, while it imports (early_cuda.py)
    from nsight_core.judge import core as judge  # lazy: its imports overlap the contestant's start
    from nsight_core.runtime.process import exit_now  # lazy: the judge has loaded it by now

    code = judge.main(argv, launched, watched=True, early=early)
    exit_now(code)  # as judge.py's own entry does: skip the interpreter's teardown
    return code


if __name__ == "__main__":
    main(sys.argv)
