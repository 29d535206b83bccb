"""The judge's entry point: start the contestant first, import the judge after.

    python -P -m nsight_core.judge.boot --standby HOME   (pre-started: waits for a job)
    python -P -m nsight_core.judge.boot --cold HOME      (its job is handed over at once)
    python -P -m nsight_core.judge.boot --idle HOME      (no settings yet: handover.py)

Every request job's judge starts here, the same way (processes/standby.py starts it): HOME
holds its `LaunchSpec` and the contestant's exact command (launch.py's `LaunchPlan`, written
by the server). This module imports only the standard library and the process machinery, so
the contestant is spawned a few hundredths of a second after this process starts; the
judge's own imports, its frameworks and its CUDA context (begun on a side thread at once:
early_cuda.py) then overlap the contestant's start instead of preceding it. The job itself
arrives later, on HOME's socket: at once for a cold judge, whenever it comes for a
pre-started one. An idle judge has no contestant until its job comes: it listens for the
job first (handover.py), so the contestant can start whatever the judge is doing then.
"""

from __future__ import annotations

import sys
from pathlib import Path

from nsight_core.processes.handover import Handover
from nsight_core.processes.launch import LaunchPlan, launch
from nsight_core.processes.sandbox import watch_parent_pipe
from nsight_core.runtime.early_cuda import EarlyCuda

MODES = ("--standby", "--cold", "--idle")
BAD_USAGE = 2


def main(argv: list[str]) -> int:
    watch_parent_pipe()  # first, as the judge does: die with the server, whatever kills it
    if len(argv) != 3 or argv[1] not in MODES:
        sys.stderr.write(f"usage: python -m nsight_core.judge.boot {'|'.join(MODES)} HOME\n")
        return BAD_USAGE
    home = Path(argv[2]).resolve()
    if argv[1] == "--idle":
        handover = Handover(home)  # before anything slow: a job may come at once
        early = EarlyCuda()
        from nsight_core.judge import core as judge  # lazy: the handover is listening
        from nsight_core.runtime.process import exit_now  # lazy: the judge has loaded it by now

        code = judge.idle_main(home, handover, early)
        exit_now(code)
        return code
    plan = LaunchPlan.read(home)  # without one the judge makes the command itself
    launched = launch(plan) if plan is not None else None
    early = EarlyCuda()  # this process's CUDA context, while it imports (early_cuda.py)
    from nsight_core.judge import core as judge  # lazy: its imports overlap the contestant's start
    from nsight_core.runtime.process import exit_now  # lazy: the judge has loaded it by now

    code = judge.main(home, prestarted=argv[1] == "--standby", launched=launched, early=early)
    exit_now(code)  # skip the interpreter's teardown: events are written, the contestant ended
    return code


if __name__ == "__main__":
    main(sys.argv)
