"""Repeated and nearly repeated inputs: the judge's determinism probes and their decoys.

Per config and annotation, the judge adds untimed calls to the config's fresh ones:

- a **repeat** gives an earlier call's inputs again (fresh copies in the slots); its
  output must be that call's output again, bit for bit (the determinism check);
- a **decoy** gives an earlier call's inputs with a few positions taken from a fresh draw
  of the input maker (a near repeat), and is checked against the reference's output on
  them like any call.

A candidate that samples a few values of its inputs to recognise a repeat and answer it
with its earlier output cannot tell a repeat from a decoy, and that answer fails the decoy.
One that compares its whole inputs can tell them apart, paying a pass over its inputs on
every call, timed ones included; it gains no time, since no repeat or decoy is ever timed,
and fakes determinism only. The positions a decoy changes are few (`DECOY_POSITIONS`), so
a sample seldom meets one; where changing them moves the reference's output less than the
tolerance (an earlier output would still pass), more are changed, up to
`DECOY_ATTEMPTS` tries, each a run of the reference.

Where they fall: each follows a fresh call of the config, either among the untimed calls
before the timed runs or after every annotation's last timed run (so no untimed call of
one annotation lands between timed runs). `REPEATS_PER_CONFIG` earlier fresh calls are
chosen, one among the timed runs (repeated after them) and one among the untimed calls,
and each gets one repeat and one decoy: a candidate that is racy only where it is timed,
or only where it is not, meets a repeat either way, and each kind of repeat has its decoy.
Which calls, and where, is drawn from the judge's secret generator.

A decoy changes only floating-point arrays, at positions where the fresh draw differs (so
an array that every draw makes alike, a mask or fixed weights, is left alone), and never
an array that is symmetric in its last two dimensions or sorted along its last: a near
repeat there is no input the maker would give. Where the reference fails on a decoy or
gives NaN or an infinity that the earlier output did not have, the call gets fresh inputs
instead.
"""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from nsight_core.runtime.check import clone_args
from nsight_core.runtime.leaves import array_leaves

REPEATS_PER_CONFIG = 2
"""Earlier fresh calls per annotation and config that are repeated, each once exactly and
once as a decoy: the untimed calls grow by twice this."""

DECOY_POSITIONS = 2
"""Positions a decoy first takes from a fresh draw."""

DECOY_ATTEMPTS = 3
"""Tries at a decoy whose output an earlier answer would not pass; each changes
`DECOY_GROWTH` times more positions than the one before."""

DECOY_GROWTH = 16

Inputs = tuple[tuple[Any, ...], dict[str, Any]]


@dataclass(frozen=True)
class Extra:
    """An untimed call beyond the config's fresh ones."""

    source: int
    """The fresh call (0: the config's first) whose inputs it repeats or nearly repeats."""
    decoy: bool


@dataclass
class ProbePlan:
    """One annotation's extra calls on one config, and what they need kept."""

    after: dict[int, list[Extra]]
    """Fresh call -> the extras made right after it, before the timed runs."""
    post: list[Extra]
    """Extras made after every annotation's last timed run of the config."""
    fresh: int = -1
    """The fresh call being made (0: the config's first)."""
    kept: dict[int, tuple[Inputs, Any]] = field(default_factory=dict)
    """Inputs and output of the fresh calls that an extra still needs."""

    @property
    def sources(self) -> set[int]:
        return {e.source for e in [*self.post, *(x for xs in self.after.values() for x in xs)]}

    def done_with(self, extra: Extra) -> None:
        """After ``extra``: drop its source's inputs and output once no extra needs them."""
        if extra in self.post:
            self.post.remove(extra)
        for extras in self.after.values():
            if extra in extras:
                extras.remove(extra)
        if extra.source not in self.sources:
            self.kept.pop(extra.source, None)


def draw_plan(
    rng: random.Random, untimed: int, runs: int, k: int = REPEATS_PER_CONFIG
) -> ProbePlan:
    """The extras of a config of ``untimed`` untimed fresh calls, then ``runs`` timed ones.

    ``k`` fresh calls are repeated, each once exactly and once as a decoy: with a timed run,
    the first is a timed call and the second an untimed one; any others are any fresh call.
    An extra of a timed call comes after the timed runs; one of an untimed call comes right
    after a fresh untimed call at or after it, or after the timed runs."""
    n = untimed + runs
    sources = []
    for i in range(k):
        if i == 0 and runs:
            sources.append(rng.randrange(untimed, n))
        elif i <= 1:
            sources.append(rng.randrange(untimed))
        else:
            sources.append(rng.randrange(n))
    plan = ProbePlan(after={}, post=[])
    for src in sources:
        for decoy in (False, True):
            extra = Extra(src, decoy)
            where = rng.randrange(src, untimed + 1) if src < untimed else untimed
            if where >= untimed:
                plan.post.append(extra)
            else:
                plan.after.setdefault(where, []).append(extra)
    rng.shuffle(plan.post)
    for extras in plan.after.values():
        rng.shuffle(extras)
    return plan


def near_repeat(
    source: Inputs, fresh: Inputs, rng: random.Random, counts: list[int]
) -> Iterator[Inputs]:
    """Copies of ``source``, each with ``counts[i]`` positions (fewer where fewer differ)
    taken from ``fresh``, spread over the arrays a decoy may change; none when no position
    may change. ``fresh`` has the same structure (another draw of the maker on the config)."""
    mine = list(array_leaves(source))
    theirs = list(array_leaves(fresh))
    if len(mine) != len(theirs):
        return
    usable = [
        (i, kind, a, b)
        for i, ((_, a, kind), (_, b, _)) in enumerate(zip(mine, theirs, strict=True))
        if _may_change(kind, a, b)
    ]
    for count in counts:
        found: list[tuple[int, int]] = []  # (array, flat index) where the draws differ
        for i, kind, a, b in usable:
            size = int(a.numel() if kind == "torch" else a.size)
            picks = rng.sample(range(size), min(size, 8 * count))
            found += [(i, p) for p in _differing(kind, a, b, picks)]
        if not found:
            return
        by_leaf: dict[int, list[int]] = {}
        for i, p in rng.sample(found, min(count, len(found))):
            by_leaf.setdefault(i, []).append(p)
        copy = clone_args(source)
        leaves = [leaf for _, leaf, _ in array_leaves(copy)]
        for i, flat in by_leaf.items():
            _, b, kind = theirs[i]
            _take(kind, leaves[i], b, flat)
        yield copy


def _may_change(kind: str, a: Any, b: Any) -> bool:
    """A floating array of ``b``'s shape that is neither symmetric nor sorted; the first
    matrix or row is looked at first, so an unstructured array costs almost nothing."""
    if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype or not _floating(kind, a):
        return False
    if len(a.shape) >= 2 and a.shape[-1] == a.shape[-2] >= 2:
        first = a.reshape(-1, *a.shape[-2:])[0]
        if bool((first[0] == first[:, 0]).all()) and bool((a == _swapped(kind, a)).all()):
            return False
    if len(a.shape) >= 1 and a.shape[-1] >= 2 and _monotone(a.reshape(-1, a.shape[-1])[:1]):
        return not _monotone(a)
    return True


def _swapped(kind: str, a: Any) -> Any:
    return a.transpose(-1, -2) if kind == "torch" else a.swapaxes(-1, -2)


def _monotone(a: Any) -> bool:
    """Sorted (either way) along the last dimension, all of it."""
    step = a[..., 1:] - a[..., :-1]
    return bool((step >= 0).all()) or bool((step <= 0).all())


def _floating(kind: str, a: Any) -> bool:
    if kind == "torch":
        return bool(a.dtype.is_floating_point)
    return str(a.dtype).startswith(("float", "bfloat"))


def _module(kind: str) -> Any:
    return sys.modules["torch" if kind == "torch" else kind]


def _differing(kind: str, a: Any, b: Any, picks: list[int]) -> list[int]:
    """Those of the flat positions ``picks`` where ``a`` and ``b`` differ."""
    if not picks:
        return []
    xp = _module(kind)
    if kind == "torch":
        idx = xp.tensor(picks, device=a.device)
        differ = a.reshape(-1).index_select(0, idx) != b.reshape(-1).index_select(0, idx)
    else:
        idx = xp.asarray(picks)
        differ = xp.take(a, idx) != xp.take(b, idx)
    mask = differ.tolist()
    return [p for p, d in zip(picks, mask, strict=True) if d]


def _take(kind: str, a: Any, b: Any, flat: list[int]) -> None:
    """Write ``b``'s values at the flat (C order) positions ``flat`` into ``a``, in place."""
    xp = _module(kind)
    if kind == "torch":
        idx = xp.tensor(flat, device=a.device)
        with xp.no_grad():
            values = b.reshape(-1).index_select(0, idx)
            if a.is_contiguous():
                a.view(-1).index_copy_(0, idx, values)
            else:
                whole = a.reshape(-1).clone()
                whole.index_copy_(0, idx, values)
                a.copy_(whole.view(a.shape))
        return
    idx = xp.asarray(flat)
    xp.put(a, idx, xp.take(b, idx))


def make_decoy(
    source: Inputs,
    earlier: Any,
    *,
    draw: Inputs,
    expect: Callable[[Inputs], Any],
    replay_passes: Callable[[Any, Any], bool],
    rng: random.Random,
    attempts: int = DECOY_ATTEMPTS,
) -> tuple[Inputs, Any] | None:
    """A decoy of the call that had inputs ``source`` and gave ``earlier``, and the
    reference's output on it; None when none can be made (then the call gets fresh inputs).

    ``draw`` is a fresh draw of the config's inputs, ``expect`` runs the reference on a
    copy, ``replay_passes(expected, earlier)`` says whether ``earlier`` would pass the
    check against ``expected``: while it would, more positions change, up to ``attempts``
    tries (a decoy that still lets it pass is kept: it is a checked call all the same)."""
    counts = [DECOY_POSITIONS * DECOY_GROWTH**i for i in range(attempts)]
    got = None
    for near in near_repeat(source, draw, rng, counts):
        try:
            expected = expect(near)
        except Exception:
            break  # no input the reference takes: the last good one, or fresh inputs
        if nonfinite(expected) and not nonfinite(earlier):
            break
        got = (near, expected)
        if not replay_passes(expected, earlier):
            break
    return got


def nonfinite(x: Any) -> bool:
    """Whether any floating value under ``x`` is NaN or an infinity."""
    for _, leaf, kind in array_leaves(x):
        if _floating(kind, leaf):
            xp = _module(kind)
            if not bool(xp.isfinite(leaf).all()):
                return True
    return isinstance(x, float) and not math.isfinite(x)
