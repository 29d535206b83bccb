"""Which kernels of an ncu report count, and what the rest says: work outside the timed
ranges, and ranges the harness never opened.

A request job's contestant runs under ncu with every kernel profiled except those of the
harness's untimed calls (`protocol.NCU_NVTX_EXCLUDE`), and the judge writes, in the order
it sent them, the calls it issued with their nonces (`CALLS_FILE`). The candidate shares
the process that opens the ranges, so a range is the harness's only when its name carries
the nonce the judge drew for that very call, and only in the order the judge issued them.
`classify` reads the report's actions in launch order (ncu serialises launches) and sorts
every kernel into:

- a timed call's kernel: in exactly one issued timed range, in order. Its values count;
- harness work: in an issued harness range (``h:``, the inputs in, the checks and the output
  out of a timed call), and a kernel the harness launches there (a copy, the mutation
  check's comparison). It counts for no run;
- foreign work: in no range of ours (a thread computing before the call message arrives,
  work after the range ended, during the output copy, a range the candidate ended early),
  or a kernel in a harness range that is not the harness's kind. Rows of the annotation whose call
  window it falls in (by its neighbours in launch order) become suspicious;
- forged: in a timed range whose key or nonce the judge never issued, in several timed
  ranges at once, or out of the order the judge issued the calls. Dropped from the values,
  and the call window's rows become suspicious.

One kernel is none of these: the contestant's prime (runtime/early_cuda.py), when its first
hello said it ran, is the report's first result and counts for nothing. The prime ran
before the job existed, so nothing can come before it; a kernel of that name anywhere
else, or without that hello, is sorted like any other.

A pure function over `ActionInfo` records, so it is tested without a GPU; the ncu backend
applies it (`ncu.records_from_report`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from nsight_core.collectors.extract import ActionInfo, ExtractedReport, KernelRecord
from nsight_core.protocol import (
    HARNESS_PREFIX,
    NVTX_DOMAIN,
    UNTIMED_PREFIX,
    RunKey,
    SuspectEvent,
    parse_range_name,
)
from nsight_core.runtime.early_cuda import PRIME_KERNEL

__all__ = [
    "CALLS_FILE",
    "Classified",
    "Finding",
    "IssuedCall",
    "IssuedCalls",
    "classify",
    "counted_records",
    "read_issued",
    "write_issued",
]

CALLS_FILE = "calls.jsonl"
"""The calls the judge issued, in order, with their nonces: written by the judge into the
job directory when the contestant has ended, read with the ncu report."""

_EXAMPLES = 3


@dataclass(frozen=True)
class IssuedCall:
    """One call the judge sent: its nonce, and which run it was (None: untimed)."""

    nonce: str
    annotation: str
    config_id: int
    run: int | None


@dataclass(frozen=True)
class IssuedCalls:
    """What the judge wrote: the calls in issue order, and whether the contestant's first
    hello said it ran the prime."""

    calls: list[IssuedCall]
    primed: bool = False


def write_issued(path: Path, calls: Sequence[IssuedCall], *, primed: bool = False) -> None:
    head = json.dumps({"primed": True}) + "\n" if primed else ""
    path.write_text(head + "".join(json.dumps(asdict(c)) + "\n" for c in calls))


def read_issued(path: Path) -> IssuedCalls | None:
    """The issued calls, or None when there is no readable file (an `@kernel` job, a report
    made elsewhere): then no kernel can be told apart from the harness's, and none is."""
    try:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        primed = bool(rows) and rows[0] == {"primed": True}
        return IssuedCalls([IssuedCall(**r) for r in rows[primed:]], primed)
    except (OSError, ValueError, TypeError):
        return None


FindingKind = Literal["foreign", "forged"]


@dataclass
class Finding:
    """Kernels of one kind, in the call windows of ``annotations`` (empty: no call's window
    can be named, so every row of the job)."""

    kind: FindingKind
    annotations: tuple[str, ...]
    count: int = 0
    kernels: list[str] = field(default_factory=list)
    """Up to three example kernel names."""
    ranges: list[str] = field(default_factory=list)
    """Up to three range names nobody issued (forged)."""

    def reason(self) -> str:
        where = _where(self.annotations)
        names = ", ".join(self.kernels)
        n = f"{self.count} kernel{'s' if self.count != 1 else ''}"
        if self.kind == "foreign":
            return (
                f"under ncu, {n} ran outside the harness's timed ranges {where} (e.g. {names}): "
                "work launched before the call, after its range ended, or during the output "
                "copy (a thread, a stream left running, a range ended early) is not in the "
                "time; do all of the call's work inside the call and join it before returning"
            )
        forged = f" ({', '.join(self.ranges)})" if self.ranges else ""
        return (
            f"under ncu, {n} ran in NVTX ranges of domain '{NVTX_DOMAIN}' the harness did not "
            f"open{forged}, or out of the order it issued the calls, {where} (e.g. {names}): "
            f"left out of every run's values; open no ranges in domain '{NVTX_DOMAIN}'"
        )

    def suspects(self) -> list[SuspectEvent]:
        targets: Sequence[str | None] = self.annotations or (None,)
        return [SuspectEvent(annotation=a, reason=self.reason()) for a in targets]


def _where(annotations: Sequence[str]) -> str:
    if not annotations:
        return "outside every call's window"
    if len(annotations) == 1:
        return f"in the call window of {annotations[0]!r}"
    return "between calls of " + " and ".join(repr(a) for a in annotations) + " (one of them)"


@dataclass
class Classified:
    """Per action (by seq), the run its values count for; and what else was found."""

    keys: dict[int, RunKey]
    findings: list[Finding]

    def suspects(self) -> list[SuspectEvent]:
        return [s for f in self.findings for s in f.suspects()]


@dataclass(frozen=True)
class _Tag:
    """One 'nspy' start/end range an action ran in."""

    kind: Literal["timed", "harness", "untimed", "other"]
    name: str
    key: RunKey | None = None
    nonce: str | None = None


def _tags(action: ActionInfo) -> list[_Tag]:
    prefix = f"{NVTX_DOMAIN}@"
    out = []
    for r in action.nvtx_ranges:
        if not r.startswith(prefix) or r.endswith("/"):
            continue  # another domain, or a push/pop range: the harness opens neither
        name = r[len(prefix) :]
        if name.startswith(UNTIMED_PREFIX):
            out.append(_Tag("untimed", name))
            continue
        harness = name.startswith(HARNESS_PREFIX)
        parsed = parse_range_name(name.removeprefix(HARNESS_PREFIX) if harness else name)
        if parsed is None:
            out.append(_Tag("other", name))
        else:
            out.append(_Tag("harness" if harness else "timed", name, parsed[0], parsed[1]))
    return out


_HARNESS_KERNELS = re.compile(r"copy|CompareEq|and_kernel", re.IGNORECASE)
"""What the harness launches around a timed call: copies of an input or output that is not
contiguous (torch's ``direct_copy_kernel``), and the mutation check's ``torch.equal`` (an
``eq`` and an ``all``). A name is all a report says, so a candidate's kernel named like
these, launched exactly then, passes as the harness's (docs/correctness.md)."""


def _is_harness_kernel(action: ActionInfo) -> bool:
    return bool(_HARNESS_KERNELS.search(action.demangled) or _HARNESS_KERNELS.search(action.kernel))


def _is_prime(action: ActionInfo) -> bool:
    """The prime as ncu reports it: a kernel of that name in no range of ours."""
    return (
        action.workload == "kernel"
        and action.kernel == PRIME_KERNEL
        and not any(r.startswith(f"{NVTX_DOMAIN}@") for r in action.nvtx_ranges)
    )


def _sort_tags(
    tags: Sequence[_Tag], index: dict[str, tuple[int, IssuedCall]], high: int
) -> tuple[list[tuple[int, _Tag]], list[str]]:
    """An action's timed and harness ranges: those the judge issued, in order (with the
    call's issue index), and the names of the others (forged)."""
    legit: list[tuple[int, _Tag]] = []
    forged: list[str] = []
    for t in tags:
        if t.kind not in ("timed", "harness"):
            continue
        hit = index.get(t.nonce) if t.nonce is not None else None
        if hit is None or hit[1].run is None or hit[0] < high:
            forged.append(t.name)
            continue
        call = hit[1]
        if t.key != RunKey(call.annotation, call.config_id, hit[1].run):
            forged.append(t.name)
        else:
            legit.append((hit[0], t))
    return legit, forged


def classify(
    actions: Sequence[ActionInfo], issued: Sequence[IssuedCall], *, primed: bool = False
) -> Classified:
    """Sort every action of a request job's report (module docstring); ``issued`` in the
    order the judge sent the calls, ``primed`` as the contestant's first hello said."""
    index = {c.nonce: (i, c) for i, c in enumerate(issued)}
    keys: dict[int, RunKey] = {}
    # Per action in launch order: the issue index of the call window it is in (None: none
    # known), and its class.
    placed: list[tuple[ActionInfo, int | None, str]] = []
    forged_names: dict[int, list[str]] = {}
    high = -1
    ordered = sorted(actions, key=lambda a: a.seq)
    if primed and ordered and _is_prime(ordered[0]):
        ordered = ordered[1:]
    for act in ordered:
        if act.workload == "range":  # range replay: the result is the range itself
            if act.key is not None:
                keys[act.seq] = act.key
            continue
        tags = _tags(act)
        legit, forged = _sort_tags(tags, index, high)
        if not legit and not forged and any(t.kind == "untimed" for t in tags):
            continue  # an untimed call's kernel that ncu did not leave out: counts for nothing
        timed = {t.key for _, t in legit if t.kind == "timed"}
        if len(timed) > 1:  # several runs' ranges at once: the harness opens one at a time
            forged += [t.name for _, t in legit if t.kind == "timed"]
            timed = set()
        window = max((i for i, _ in legit), default=None)
        high = window if window is not None else high
        if forged:
            forged_names[act.seq] = forged
        if len(timed) == 1:
            keys[act.seq] = next(k for k in timed if k is not None)
            placed.append((act, window, "forged" if forged else "timed"))
        elif forged:
            placed.append((act, window, "forged"))
        elif legit and _is_harness_kernel(act):
            placed.append((act, window, "harness"))
        else:
            placed.append((act, window, "foreign"))
    return Classified(keys, _findings(placed, issued, forged_names))


def _findings(
    placed: Sequence[tuple[ActionInfo, int | None, str]],
    issued: Sequence[IssuedCall],
    forged_names: dict[int, list[str]],
) -> list[Finding]:
    """Group the foreign and forged kernels by the call windows they fall in: its own call
    when it is in one, else every call issued from its nearest placed neighbour before it
    to the one after it in launch order (to the last call when none follows). Not only the
    neighbours: the calls between them left no kernel in their own ranges, and a candidate
    whose every kernel ran outside them is exactly such a call."""
    windows = [w for _, w, _ in placed]
    before: list[int | None] = []
    last: int | None = None
    for w in windows:
        last = w if w is not None else last
        before.append(last)
    after: list[int | None] = [None] * len(windows)
    nxt: int | None = None
    for i in range(len(windows) - 1, -1, -1):
        nxt = windows[i] if windows[i] is not None else nxt
        after[i] = nxt
    # The judge issues every call of the reference first, before any candidate exists: work
    # between the reference's last call and a candidate's first is the candidates'.
    reference = issued[0].annotation if issued else None
    found: dict[tuple[str, tuple[str, ...]], Finding] = {}
    for i, (act, w, cls) in enumerate(placed):
        if cls not in ("foreign", "forged"):
            continue
        lo, hi = before[i], after[i]
        if w is not None:
            near: Sequence[int] = [w]
        elif lo is None and hi is None:
            near = []  # no placed neighbour at all: no call can be named
        else:
            near = range(lo or 0, (len(issued) - 1 if hi is None else hi) + 1)
        named = {issued[j].annotation for j in near}
        if len(named) > 1:
            named.discard(reference)
        anns = tuple(sorted(named))
        kind: FindingKind = "forged" if cls == "forged" else "foreign"
        f = found.setdefault((kind, anns), Finding(kind, anns))
        f.count += 1
        if act.kernel not in f.kernels and len(f.kernels) < _EXAMPLES:
            f.kernels.append(act.kernel)
        for name in forged_names.get(act.seq, []):
            if name not in f.ranges and len(f.ranges) < _EXAMPLES:
                f.ranges.append(name)
    return list(found.values())


def counted_records(
    report: ExtractedReport, report_path: Path
) -> tuple[list[KernelRecord], Classified | None]:
    """The records that count, and what else was found: with the judge's issued calls
    beside the report (a request job), only kernels of issued timed ranges in issue order;
    without them (an `@kernel` job, a report made elsewhere), every record as extracted."""
    issued = read_issued(report_path.with_name(CALLS_FILE))
    if issued is None:
        return list(report.records), None
    found = classify(report.actions, issued.calls, primed=issued.primed)
    records = [
        KernelRecord(found.keys[a.seq], a.kernel, a.demangled, m, value, unit, a.seq, a.launch)
        for a in report.actions
        if a.seq in found.keys
        for m, (value, unit) in a.values.items()
    ]
    return records, found
