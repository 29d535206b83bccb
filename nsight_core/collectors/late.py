"""Work after a timed window: the rule that turns what an in-process timer saw into a Reason.

An in-process timer closes its window when the call returns (events: an event on the
harness's stream; the host clock on a CPU). A call that leaves work running past that point
(a stream it never joins to the harness's, a thread that finishes the output, work moved
into the output's copy) is timed short, while the harness's device-wide synchronization
before the output is checked still makes the output right. So the events timer measures,
per call, how long the device stayed busy after the window beyond what an honest call
shows (`ReplyMsg.after_ns`), and the judge asks `late_work_reason` once per annotation
and config. The reason makes that annotation's rows suspicious.

The per-call number is read on the device where it can be (work queued on the harness's
stream behind the window, less the host's own time between the two event records; the
output's copy beyond an honest copy), and beyond a noise allowance where it cannot (work on
other streams after the copy, seen through a host synchronization). Still, the rule reads
the median of a config's timed calls: one late event does not flag an honest candidate, a
candidate that leaves work behind on every call is flagged.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from nsight_core.collectors.window_guard import AFTER_PARTS

AFTER_FLOOR_NS = 10_000.0
"""Flag only when the median work after the window exceeds 10 us in all: the device-side
readings still carry the jitter of event timestamps against the host clock, and a busy
contestant's host time between two records (tests/gpu/test_window_guard_gpu.py prints
honest and hacked numbers side by side)."""
AFTER_REL = 0.25
"""... and a quarter of the median window: a long call's wake-ups vary more, and work worth
less than this would not change a ranking."""


def late_work_reason(
    config_id: int,
    calls: Sequence[tuple[float | None, float | None]],
    parts: Sequence[Mapping[str, float]] = (),
) -> str | None:
    """The Reason for one annotation's timed calls on one config, each ``(window ns, after
    ns)``; None when the timer measured nothing after its windows or the median stays within
    the limit. ``parts`` (each call's after ns by where it ran, `WindowGuard.after_parts`)
    lets the Reason say where, so the fix is clear."""
    after = [a for _w, a in calls if a is not None]
    if not after:
        return None
    windows = [w for w, _a in calls if w is not None]
    med_after = statistics.median(after)
    med_window = statistics.median(windows) if windows else 0.0
    limit = max(AFTER_FLOOR_NS, AFTER_REL * med_window)
    if med_after <= limit:
        return None
    return (
        f"work ran after the timed window closed (config {config_id}): the device stayed "
        f"busy a median {med_after / 1e3:.3g} us past the window's end (window median "
        f"{med_window / 1e3:.3g} us; flagged above {AFTER_FLOOR_NS / 1e3:g} us and "
        f"{AFTER_REL:g}x the window{_where(parts)}), so the time leaves part of the call "
        "out: a stream never joined to the caller's, a thread still working after the call "
        "returned, or work in the output's copy. Join every stream to the current one "
        "before returning"
    )


def _where(parts: Sequence[Mapping[str, float]]) -> str:
    """'; medians by where: ...' for the parts whose median is not zero ('' when none)."""
    found = []
    for key, words in AFTER_PARTS.items():
        seen = [p.get(key, 0.0) for p in parts]
        med = statistics.median(seen) if seen else 0.0
        if med > 0.0:
            found.append(f"{words} {med / 1e3:.3g} us")
    return f"; medians by where it ran: {', '.join(found)}" if found else ""
