"""The judge's entry point: listen for the job first, import the judge after.

    python -P -m nsight_core.judge.boot --idle HOME      (no contestant until its job comes)
    python -P -m nsight_core.judge.boot --standby HOME   (pre-started: its contestant too)

Every request job's judge starts here (standby/prestarted.py starts it) and takes its job on
HOME's socket (judge/handover.py), whenever it comes: a job that starts cold goes to an
idle judge spawned for it and handed the job at once. This module imports only the standard
library and the process machinery, so the socket listens, and a pre-started judge's
contestant is spawned, a few hundredths of a second after this process starts; the judge's
own imports, its frameworks and its CUDA context (begun on a side thread at once:
early_cuda.py) then overlap the contestant's start instead of preceding it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from nsight_core.judge.handover import Handover
from nsight_core.processes.launch import LaunchPlan, launch
from nsight_core.processes.sandbox import watch_parent_pipe
from nsight_core.runtime.early_cuda import EarlyCuda

MODES = ("--idle", "--standby")
BAD_USAGE = 2


def main(argv: list[str]) -> int:
    watch_parent_pipe()  # first, as the judge does: die with the server, whatever kills it
    if len(argv) != 3 or argv[1] not in MODES:
        sys.stderr.write(f"usage: python -m nsight_core.judge.boot {'|'.join(MODES)} HOME\n")
        return BAD_USAGE
    home = Path(argv[2]).resolve()
    prestarted = argv[1] == "--standby"
    launched = None
    if prestarted:  # its contestant now; without a plan the judge makes the command itself
        plan = LaunchPlan.read(home)
        launched = launch(plan) if plan is not None else None
    handover = Handover(home, launches=not prestarted)  # before anything slow
    early = EarlyCuda()  # this process's CUDA context, while it imports (early_cuda.py)
    from nsight_core.judge import entry as judge  # lazy: the contestant or the handover is up
    from nsight_core.runtime.process import exit_now  # lazy: the judge has loaded it by now

    if prestarted:
        code = judge.standby_main(home, handover, launched, early)
    else:
        code = judge.idle_main(home, handover, early)
    exit_now(code)  # skip the interpreter's teardown: events are written, the contestant ended
    return code


if __name__ == "__main__":
    main(sys.argv)
