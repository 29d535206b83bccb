"""A job's processes: found in /proc (group, session, parent links, job id) and killed together.

This is what makes "every process has a time limit and dies with its group" hold for
descendants that left the group (``setsid``) or lost their parent: each carries the job's id,
and the end-of-job walk freezes and kills everything that belongs to the job.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass

JOB_MARKER_ENV = "NSPY_SANDBOX_JOBS"
"""Ids of the sandboxed jobs a process belongs to, outermost first, space-separated.

Inherited by every descendant (nested sandboxes append to it), so a process that left the
group with ``setsid`` and lost its parent is still found by reading ``/proc/<pid>/environ``.
"""

_KILL_ROUNDS_S = 3.0
"""How long the end-of-job walk keeps killing until no member of the job is alive."""


@dataclass(frozen=True)
class _Proc:
    ppid: int
    pgid: int
    sid: int
    zombie: bool
    rss_pages: int


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def proc_table() -> dict[int, _Proc]:
    """Every process now: parent, group, session, zombie or not, resident pages."""
    table: dict[int, _Proc] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read()
            fields = raw[raw.rfind(b")") + 2 :].split()
            table[int(name)] = _Proc(
                ppid=int(fields[1]),
                pgid=int(fields[2]),
                sid=int(fields[3]),
                zombie=fields[0] in (b"Z", b"X"),
                rss_pages=int(fields[21]),
            )
        except (OSError, IndexError, ValueError):
            continue
    return table


def _job_members(leader: int, table: Mapping[int, _Proc]) -> set[int]:
    """The leader, its group and session, and every descendant of those by parent links."""
    members = {pid for pid, p in table.items() if leader in (pid, p.pgid, p.sid) and pid != 0}
    children: dict[int, list[int]] = {}
    for pid, p in table.items():
        children.setdefault(p.ppid, []).append(pid)
    stack = list(members)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in members:
                members.add(child)
                stack.append(child)
    return members


def marked(token: bytes, table: Mapping[int, _Proc], skip: set[int]) -> set[int]:
    """Live processes whose environment names job ``token`` in ``NSPY_SANDBOX_JOBS``."""
    prefix = JOB_MARKER_ENV.encode() + b"="
    found: set[int] = set()
    for pid, p in table.items():
        if pid in skip or p.zombie:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                data = f.read()
        except OSError:
            continue
        for entry in data.split(b"\0"):
            if entry.startswith(prefix) and token in entry[len(prefix) :].split():
                found.add(pid)
    return found


def self_and_ancestors(table: Mapping[int, _Proc] | None = None) -> set[int]:
    """This process and its ancestors: never killed by a walk, whatever they carry."""
    table = proc_table() if table is None else table
    out = {0, 1, os.getpid()}
    pid = os.getpid()
    while pid in table and table[pid].ppid not in out:
        pid = table[pid].ppid
        out.add(pid)
    return out


def kill_pids(pids: set[int], sig: signal.Signals = signal.SIGKILL) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def kill_job(leader: int, token: bytes) -> int:
    """SIGKILL the whole job, found first and frozen; the number of strays outside its group.

    Members are stopped (SIGSTOP) walk after walk until a walk finds no new one: a stopped
    process can neither fork nor exit, so parent links hold and nothing is born unseen. Then
    all get SIGKILL, until a walk finds none alive. The leader is still unreaped, so its
    pid, group and session ids are still the job's. Killed processes re-parented to us (we
    are a subreaper when nested) are reaped.
    """
    protected = self_and_ancestors()
    stopped: set[int] = set()
    strays: set[int] = set()
    end = time.monotonic() + _KILL_ROUNDS_S
    sig = signal.SIGSTOP
    while True:
        table = proc_table()
        members = (_job_members(leader, table) | marked(token, table, protected)) - protected
        live = {pid for pid in members if not table[pid].zombie}
        strays |= {pid for pid in live if table[pid].pgid != leader}
        if sig == signal.SIGSTOP:
            live -= stopped
            if not live:
                sig = signal.SIGKILL
                continue
            stopped |= live
        elif not live or time.monotonic() > end:
            break
        signal_group(leader, sig)
        kill_pids(live, sig)
        if time.monotonic() > end:
            sig = signal.SIGKILL
        time.sleep(0.002 if sig == signal.SIGSTOP else 0.01)
    me = os.getpid()
    for pid in stopped - {leader}:
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if fields[0] == b"Z" and int(fields[1]) == me:
                os.waitpid(pid, os.WNOHANG)
    return len(strays)


def job_rss(leader: int) -> int:
    """Resident bytes summed over the job's processes (shared pages count once per process)."""
    table = proc_table()
    members = _job_members(leader, table) - self_and_ancestors(table)
    return sum(table[pid].rss_pages for pid in members if not table[pid].zombie) * _PAGE


def signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
