"""CUPTI's activity records as the contestant keeps them, and which belong to a timed call.

Pure data and rules, no CUPTI calls (tested on CPU): what is copied out of a record, how a
flush's records split by launch into one call's and the rest, and the call's spans for its
reply. The timer that reads the records (`CuptiTimer`) is in cupti.py; both run in the
contestant, where the integrity watch covers both modules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from nsight_core.collectors.kernel_names import kernel_name, launch_label


@dataclass(frozen=True)
class KernelActivity:
    """What is kept of one kernel record (copied out of CUPTI's buffer)."""

    name: str
    start: int
    end: int
    stream: int
    correlation_id: int
    graph_id: int = 0
    grid: tuple[int, int, int] = (0, 0, 0)
    block: tuple[int, int, int] = (0, 0, 0)


@dataclass(frozen=True)
class CopyActivity:
    """What is kept of one memcpy or memset record: its kind ('memcpy DtoD', 'memset')."""

    kind: str
    nbytes: int
    start: int
    end: int
    correlation_id: int


_COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA"}
_COPY_KINDS |= {8: "DtoD", 9: "HtoH", 10: "PtoP"}
"""CUpti_ActivityMemcpyKind's values (cupti_activity.h); any other reads 'memcpy'."""


def copy_kind(kind: int | None) -> str:
    """A copy record's kind as a name ('memcpy DtoD'); None: a memset."""
    if kind is None:
        return "memset"
    name = _COPY_KINDS.get(int(kind))
    return f"memcpy {name}" if name else "memcpy"


@dataclass(frozen=True)
class ApiActivity:
    """What is kept of one runtime/driver API record: when the launch call ran on the host."""

    start: int
    end: int
    correlation_id: int
    thread: int = 0
    """The launching host thread (CUPTI's threadId; 0 when the record has none)."""


@dataclass(frozen=True)
class KernelSpan:
    """One kernel of a timed call, as the contestant reports it (base name, device times)."""

    name: str
    start_ns: int
    end_ns: int
    stream: int
    launch: str = ""
    """Its grid and block (`launch_label`); a copy's bytes."""
    kind: Literal["kernel", "copy"] = "kernel"
    """'copy': a memcpy or memset (``name`` says which), in the kernel set, never timed."""


_Rec = TypeVar("_Rec", KernelActivity, CopyActivity)


def split_by_launch(
    kernels: Sequence[_Rec], apis: Sequence[ApiActivity], t0: int, t1: int
) -> tuple[list[_Rec], list[_Rec], list[_Rec]]:
    """(launched before t0, inside [t0, t1], after t1), each in order of device start.

    A kernel belongs to the call when an API record with its correlation id started inside
    the window; without any API record of that id, when its device start lies inside it.
    One flush after the call thus also yields what ran between calls (before) and what
    another thread launched while the harness flushed (after, kept for the next call).
    Copies and memsets are split alike (their API records are not kept: by device start).
    """
    launches = {a.correlation_id: a.start for a in apis}
    parts: tuple[list[_Rec], list[_Rec], list[_Rec]] = ([], [], [])
    for k in sorted(kernels, key=lambda k: (k.start, k.end, k.correlation_id)):
        at = launches.get(k.correlation_id, k.start)  # the launch, else the device start
        parts[0 if at < t0 else 2 if at > t1 else 1].append(k)
    return parts


def harness_thread(apis: Sequence[ApiActivity], t0: int) -> int | None:
    """The thread of the last launch that started before ``t0``: the harness's L2 flush,
    launched just before a call's window on the thread that calls candidates (with every
    API recorded, the device synchronisation after it)."""
    before = [a for a in apis if a.start < t0 and a.thread]
    return max(before, key=lambda a: a.start).thread if before else None


def launched_elsewhere(
    kernels: Sequence[KernelActivity], apis: Sequence[ApiActivity], harness: int | None
) -> list[KernelActivity]:
    """Kernels whose launch ran on a thread other than the harness's.

    Between two timed calls only the harness runs on its thread (output copies, checks); a
    kernel launched there by another thread is work outside any call's range: a thread or
    stream a candidate left running, whose kernels can also land in later calls' windows.
    """
    if harness is None:
        return []
    thread_of = {a.correlation_id: a.thread for a in apis if a.thread}
    return [k for k in kernels if thread_of.get(k.correlation_id, harness) != harness]


def incomplete(kernels: Sequence[KernelActivity]) -> list[KernelActivity]:
    """Records without usable timestamps (CUPTI writes 0 when it could not collect them)."""
    return [k for k in kernels if k.start <= 0 or k.end <= 0 or k.end < k.start]


def call_spans(
    kernels: Sequence[KernelActivity], copies: Sequence[CopyActivity]
) -> list[KernelSpan]:
    """A call's kernels in start order, each with its launch; then its copies, one span per
    kind and size (how many in its launch: a call that copies thousands of times still
    sends a short reply)."""
    spans = [
        KernelSpan(
            kernel_name(k.name), k.start, k.end, k.stream, launch_label(k.grid, k.block, k.name)
        )
        for k in kernels
    ]
    grouped: dict[tuple[str, int], list[CopyActivity]] = {}
    for c in copies:
        grouped.setdefault((c.kind, c.nbytes), []).append(c)
    for (kind, nbytes), same in grouped.items():
        times = f" x{len(same)}" if len(same) > 1 else ""
        start, end = min(c.start for c in same), max(c.end for c in same)
        spans.append(KernelSpan(kind, start, end, 0, f"{nbytes} B{times}", "copy"))
    return spans
