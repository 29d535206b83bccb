"""The contestant's warm-up table (warm_up.py's docstring) is what `Steps.plan` does: the
page a reader trusts and the code that runs cannot drift apart."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from nsight_core.contestant import warm_up
from nsight_core.contestant.warm_up import Steps

COLUMNS = {
    "cold, range": (False, ("range",)),
    "cold, clock or cupti": (False, ("clock", "cupti")),
    "pre-started, range": (True, ("range",)),
    "pre-started, clock or cupti": (True, ("clock", "cupti")),
}


def _table() -> dict[str, dict[str, str]]:
    doc = warm_up.__doc__ or ""
    lines = [ln for ln in doc.splitlines() if ln.startswith("|") and not ln.startswith("|---")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for ln in lines[1:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        rows[cells[0]] = dict(zip(header[1:], cells[1:], strict=True))
    return rows


def _cell(steps: Steps, step: str) -> str:
    if step == "cuda_thread" or step == "timer":
        return "yes"  # every contestant takes these
    if step == "frameworks":
        return ", ".join(steps.frameworks)
    if step == "gpu_path":
        if not steps.gpu_path:
            return "no"
        return "yes, with the flush buffer" if steps.flush_buffer else "yes"
    return "yes" if getattr(steps, step) else "no"


@pytest.mark.parametrize("column", list(COLUMNS))
def test_the_documented_table_is_the_plan(column: str) -> None:
    table = _table()
    assert set(table) == {
        "cuda_thread",
        "prime",
        "frameworks",
        "timer",
        "gpu_path",
        "triton_thread",
    }
    prestarted, timers = COLUMNS[column]
    for timer in timers:
        steps = Steps.plan(prestarted=prestarted, timer_kind=timer)
        got = {step: _cell(steps, step) for step in table}
        assert got == {step: table[step][column] for step in table}, (column, timer)


def test_a_cold_contestants_start_ends_with_no_side_thread_and_an_account() -> None:
    """In a fresh interpreter, as a contestant starts: every step up to the ready line runs,
    the CUDA side thread is joined (none may outlive confinement), and the account names
    each step that ran; on a host without a GPU nothing fails."""
    code = textwrap.dedent(
        """
        import json, threading
        from nsight_core.contestant.warm_up import WarmUp
        warm = WarmUp(prestarted=False, timer_kind="clock")
        timer = warm.before_job()
        names = [t.name for t in threading.enumerate()]
        assert "nspy early cuda" not in names, names
        assert warm.after_confine() is None  # no Triton thread for an in-process timer
        print(json.dumps([sorted(warm.seconds), type(timer).__name__, warm.primed]))
        """
    )
    out = subprocess.run(
        [sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    steps, timer, primed = json.loads(out.stdout)
    assert {"frameworks", "cuda", "timer"} <= set(steps), steps
    assert (timer, primed) == ("ClockTimer", False)
