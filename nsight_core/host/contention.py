"""What competes with a job for this host's CPUs, read around the job.

An in-process timer (events, and cupti's host side) measures wall time, and on a busy host
that includes waiting for a CPU: measured from outside on a loaded 2-core host, a torch
candidate 30-100x faster than its reference read as resolvably slower, and nothing in the
answer said the host was busy. So the pipeline reads the load average and the CPUs this
process may use before and after each job; the result's provenance says both, and the rows
of an in-process timer carry a reason when the host had more runnable work than CPUs.
(Each of a job's two processes gets half the CPUs' math threads: processes/sandbox/env.py.)

A GPU is shared the same way: another tenant's kernels take SMs and memory bandwidth from a
job's, on every backend. NVML's list of processes with a context on the job's GPU is read on
a side thread while the job starts (`TenantWatch`), and the rows of a job that shared its
GPU with a process not ours say so.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from nsight_core.processes.sandbox.env import usable_cpus


@dataclass(frozen=True)
class HostLoad:
    load_1m: float | None
    """The 1-minute load average (runnable and waiting tasks); None where unknown."""
    cpus: int
    """CPUs this process may run on (its affinity), which the jobs' children inherit."""
    gpu_ours: int | None = None
    """Processes of this server with a context on the job's GPU; None where not read."""
    gpu_others: tuple[str, ...] = ()
    """Other processes with a context on the job's GPU ("pid N (name, M MiB)")."""


def host_load(tenants: tuple[int, list[str]] | None = None) -> HostLoad:
    try:
        load: float | None = os.getloadavg()[0]
    except OSError:
        load = None
    if tenants is None:
        return HostLoad(load, usable_cpus())
    return HostLoad(load, usable_cpus(), tenants[0], tuple(tenants[1]))


class TenantWatch:
    """NVML's tenants of a job's GPU, read on a daemon thread while the job starts: NVML's
    initialisation is not free, and the job's result should not wait for it. Only for a job
    placed on a GPU (``gpu``: the server's slot, as CUDA_VISIBLE_DEVICES names it); a job
    with no GPU named may run on the CPU, and a GPU it never used must not be blamed."""

    def __init__(self, gpu: str | None) -> None:
        self._found: tuple[int, list[str]] | None = None
        self._thread: threading.Thread | None = None
        if gpu is not None:
            self._thread = threading.Thread(
                target=self._read, args=(gpu,), name="nspy gpu tenants", daemon=True
            )
            self._thread.start()

    def _read(self, gpu: str) -> None:
        from nsight_core.host.gpus import gpu_tenants  # lazy: the server's side only

        self._found = gpu_tenants(gpu)

    def result(self, timeout_s: float = 5.0) -> tuple[int, list[str]] | None:
        if self._thread is not None:
            self._thread.join(timeout_s)
        return self._found


def gpu_shared(load: HostLoad) -> str | None:
    """A reason for every row of a job whose GPU had a context of a process not ours."""
    if not load.gpu_others:
        return None
    listed = ", ".join(load.gpu_others[:4]) + (" ..." if len(load.gpu_others) > 4 else "")
    return (
        f"GPU shared: {len(load.gpu_others)} other process(es) had a CUDA context on this "
        f"job's GPU ({listed}); their kernels may have run beside this job's, so compare "
        "with care (a GPU of its own)"
    )


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
    gpu = ""
    if after.gpu_ours is not None:
        others = "; ".join(after.gpu_others) or "none"
        gpu = (
            f"; on its GPU while it started: {after.gpu_ours} process(es) of this server, "
            f"others: {others}"
        )
    return (
        f"host: {after.cpus} CPU(s), 1-minute load average {fmt(before.load_1m)} before the "
        f"job and {fmt(after.load_1m)} after{threads}{gpu}"
    )
