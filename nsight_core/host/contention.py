"""What competes with a job for this host's CPUs, read around the job.

An in-process timer (events, and cupti's host side) measures wall time, and on a busy host
that includes waiting for a CPU: measured from outside on a loaded 2-core host, a torch
candidate 30-100x faster than its reference read as resolvably slower, and nothing in the
answer said the host was busy. So the pipeline reads the load average and the CPUs this
process may use before and after each job; the result's provenance says both, and the rows
of an in-process timer carry a reason when the host had more runnable work than CPUs.
(Each of a job's two processes gets half the CPUs' math threads: processes/sandbox/env.py.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from nsight_core.processes.sandbox.env import usable_cpus


@dataclass(frozen=True)
class HostLoad:
    load_1m: float | None
    """The 1-minute load average (runnable and waiting tasks); None where unknown."""
    cpus: int
    """CPUs this process may run on (its affinity), which the jobs' children inherit."""


def host_load() -> HostLoad:
    try:
        load: float | None = os.getloadavg()[0]
    except OSError:
        load = None
    return HostLoad(load, usable_cpus())


def contention(before: HostLoad, after: HostLoad) -> str | None:
    """A reason for an in-process timer's rows when the host had more runnable work than
    CPUs around the job; None when it did not, or when the load is unknown."""
    loads = [x.load_1m for x in (before, after) if x.load_1m is not None]
    if not loads or max(loads) <= after.cpus:
        return None
    return (
        f"host contended: 1-minute load average {max(loads):.1f} on {after.cpus} CPU(s) around "
        "this job; an in-process timer's wall time includes waiting for a CPU, so compare "
        "with care (a quieter host, or an external profiler, ncu)"
    )


def load_note(before: HostLoad, after: HostLoad, math_threads: str | None) -> str:
    def fmt(x: float | None) -> str:
        return "unknown" if x is None else f"{x:.2f}"

    threads = f"; each of its processes {math_threads} math thread(s)" if math_threads else ""
    return (
        f"host: {after.cpus} CPU(s), 1-minute load average {fmt(before.load_1m)} before the "
        f"job and {fmt(after.load_1m)} after{threads}"
    )
