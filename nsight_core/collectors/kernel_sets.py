"""A timed call's kernel set, as ncu and cupti record it, and what a difference between the
calls of one row says.

A row's runs are one measurement only if each timed call did the same work. A candidate
whose calls differ (a kernel captured once and skipped later, work skipped by the data or
by a count of calls, a fast path taken on some calls only) has runs that time different
things: their spread and their comparison mix them. The count check (rows/run_values.py)
already refuses runs that launch different numbers of kernels; this compares what is left,
the kernels themselves.

A call's kernel set is the multiset of its kernels, each by name and launch (grid, block
and a digest of the full name, `kernel_names.launch_label`, so two instantiations of one
template differ), after the ignore globs: under ncu from the report's actions in the call's
range, under cupti from the call's activity records, where it also holds the call's copies
and memsets by kind and bytes. Only timed calls are compared, among themselves: their inputs are fresh and none is a repeat, and
every one comes after the config's warm-up. Untimed calls are not, on purpose: warm-up may
autotune, compile, capture a graph or allocate; a repeat answered from a memo of equal
inputs does less work, honestly; ncu leaves untimed calls out of its report.

What a difference means:

- kernels (names or launches) differ: the runs are not one measurement, and the row is
  suspicious (`KernelSetFinding.suspicious`);
- only the copies or memsets differ: neither backend times them, so the numbers stand, and
  the row names the difference (an honest cache that copies on some calls only).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from nsight_core.collectors.kernel_names import launch_dims

COPY_METRIC = "nspy__copy"
"""The metric of a cupti record that is a copy or memset of a call (its kernel is the
copy's kind, its launch the bytes): in the call's kernel set only, never a value or a row."""

_EXAMPLES = 3
_LABEL_CHARS = 160


class Work(NamedTuple):
    """One launch of a call's kernel set: what tells it apart, and how a Reason names it."""

    identity: str
    """Name and launch with the full name's digest: equal launches of one kernel are equal."""
    label: str
    """Name, grid and block, as a Reason names the launch."""
    copy: bool = False
    """A copy or memset (cupti), which no backend times."""


def work_of(kernel: str, launch: str, *, copy: bool = False) -> Work:
    """The kernel-set entry of one launch (``launch`` as `kernel_names.launch_label`
    writes it, or a copy's bytes)."""
    if copy:
        label = f"{kernel} {launch}".strip()
        return Work(label, label, True)
    return Work(f"{kernel}{launch}", f"{kernel}{launch_dims(launch)}")


@dataclass(frozen=True)
class KernelSetFinding:
    """What one row's timed calls' kernel sets say: a Reason, and whether it is a verdict."""

    reason: str
    suspicious: bool


def _runs(runs: Sequence[int]) -> str:
    ordered = sorted(runs)
    return f"run {ordered[0]}" if len(ordered) == 1 else f"runs {', '.join(map(str, ordered))}"


def _items(diff: Counter[str], labels: dict[str, str]) -> str:
    if not diff:
        return "nothing"
    names = [
        (f"{n}x " if n > 1 else "") + labels.get(identity, identity)[:_LABEL_CHARS]
        for identity, n in sorted(diff.items())
    ]
    more = f" and {len(names) - _EXAMPLES} more" if len(names) > _EXAMPLES else ""
    return ", ".join(names[:_EXAMPLES]) + more


def _labels(calls: Sequence[tuple[int, Sequence[Work]]]) -> dict[str, str]:
    """identity -> label; the identity itself, digest and all, where two identities share
    a label (two instantiations of one template), so the Reason shows that they differ."""
    by_identity = {w.identity: w.label for _, works in calls for w in works}
    shared = Counter(by_identity.values())
    return {i: (i if shared[label] > 1 else label) for i, label in by_identity.items()}


def _difference(extra: Counter[str], missing: Counter[str], labels: dict[str, str]) -> str:
    if extra and missing:
        return f"launched {_items(extra, labels)} in place of {_items(missing, labels)}"
    if extra:
        return f"also launched {_items(extra, labels)}"
    return f"did not launch {_items(missing, labels)}"


def _describe(calls: Sequence[tuple[int, Counter[str]]], labels: dict[str, str]) -> str:
    """The most common set's runs, then each other set's runs and how it differs from it."""
    groups: dict[tuple[tuple[str, int], ...], list[int]] = {}
    sets: dict[tuple[tuple[str, int], ...], Counter[str]] = {}
    for run, works in calls:
        key = tuple(sorted(works.items()))
        groups.setdefault(key, []).append(run)
        sets[key] = works
    # A tie goes to the set of the earliest run.
    order = sorted(groups, key=lambda k: (-len(groups[k]), min(groups[k])))
    usual, others = sets[order[0]], order[1:]
    parts = [f"{_runs(groups[order[0]])} launched one set"]
    parts += [
        f"{_runs(groups[k])} {_difference(sets[k] - usual, usual - sets[k], labels)}"
        for k in others[:_EXAMPLES]
    ]
    if len(others) > _EXAMPLES:
        parts.append(f"{len(others) - _EXAMPLES} more sets differ too")
    return "; ".join(parts)


def kernel_set_finding(calls: Sequence[tuple[int, Sequence[Work]]]) -> KernelSetFinding | None:
    """Compare the kernel sets of one row's valid timed calls, each ``(run, its set)``.

    None when they agree (or fewer than two calls were recorded). Kernels that differ make
    the finding a verdict; copies or memsets alone that differ make it a note.
    """
    if len(calls) < 2:
        return None
    labels = _labels(calls)
    kernels = [(run, Counter(w.identity for w in works if not w.copy)) for run, works in calls]
    if len({tuple(sorted(c.items())) for _, c in kernels}) > 1:
        return KernelSetFinding(
            "kernel set differs between timed calls: "
            + _describe(kernels, labels)
            + ". The runs did different work, so they are not one measurement; make every "
            "call launch the same kernels with the same grids (leave autotuning, compiling "
            "and caching to the first, untimed call; no path chosen by call count or by "
            "timing). A launch sized from the data (after nonzero, unique or routing) "
            "differs too: time such a kernel on inputs of fixed structure",
            suspicious=True,
        )
    copies = [(run, Counter(w.identity for w in works if w.copy)) for run, works in calls]
    if len({tuple(sorted(c.items())) for _, c in copies}) > 1:
        return KernelSetFinding(
            "copies or memsets differ between timed calls: "
            + _describe(copies, labels)
            + ". Kernels are alike and copies are not in the time, so the values stand",
            suspicious=False,
        )
    return None


__all__ = ["COPY_METRIC", "KernelSetFinding", "Work", "kernel_set_finding", "work_of"]
