"""Inputs beyond the nominal regime: untimed checks on scaled, negated and heavy-tailed inputs.

Every fresh call is checked on inputs the input maker gives at its nominal scale, so a
candidate can pass by being accurate there only: a softmax without the max subtraction
overflows for large logits, a kernel that computes in float16 loses its precision at
x1e-3 or overflows at x64, one may assume non-negative inputs or clip them. So per config
and candidate the judge adds one untimed call per regime (`REGIMES`) on a fresh draw of
the input maker whose floating-point arrays it transforms:

- ``scaled x1e-3`` and ``scaled x64``: every such array times the factor;
- ``sign-flipped``: negated;
- ``heavy-tailed``: each element times the magnitude of a Student-t draw with 2 degrees of
  freedom (``|z| / sqrt(e)``, z standard normal, e standard exponential: half of the
  factors below 0.82, one in k^2 above about k), so a few elements are hundreds of times
  larger than the rest and the signs stay as the maker made them.

Arrays that are not floating point (indices, masks, labels) and arrays that every draw
makes alike (fixed weights, a constant mask: equal in two draws) are left as they are, and
so is structure the maker gives: a sorted array is not negated nor made heavy-tailed, a
symmetric one not made heavy-tailed (scaling keeps both). A regime that changes nothing is
not called.

Where the reference allows, only: the judge (trusted) runs the reference on the
transformed inputs, and a regime in which it raises, or gives NaN or an infinity where the
config's nominal output had none, is not checked on that config (the job's notes say so).

Tolerance, per array of the output: atol is the check's (or the dtype's) times the ratio
of that array's largest finite magnitude in the regime to the same in the config's first
nominal output (1 where either is 0), as rounding errors scale with the values rounded;
but never below the smaller of atol and the dtype's smallest normal number (float16's
atol already lies below it, where rounding is coarser than atol). rtol is the check's
times the ratio of the changed inputs' largest magnitude to the same before, where they
grew: a function of its inputs' differences (a softmax, a log-sum-exp) rounds its inputs
to eps times their magnitude, not its output's (an honest softmax through log-sum-exp is
off by 6e-5 at logits of 1000). Where a trivial answer passes the nominal check, its
margin scales by the whole output's ratio. A candidate that fails a regime fails its
check (`incorrect`) with a Reason that names the inputs, the regime and the config.

Never timed: a regime call comes right after an untimed fresh call or after every
annotation's last timed run, as probes.py's extras do, at places drawn from the judge's
generator, always in `REGIMES`' order (a candidate that fails several is named for the
first). Not made for the reference, on a config whose check cannot discriminate
(discrimination.py: its verdict already says so), or where a GPU MODE task's own check
judges (it decides on its own data only).
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from nsight_core.judge.probes import _floating, _module, _monotone, _swapped, nonfinite
from nsight_core.judge.verdict import TRIVIAL_MARGIN, Tally, TrivialBound, tolerances
from nsight_core.runtime import formats
from nsight_core.runtime.check import clone_args, compare_outputs
from nsight_core.runtime.compare import array_kind, default_tolerance
from nsight_core.runtime.leaves import array_leaves, walk

Inputs = tuple[tuple[Any, ...], dict[str, Any]]


@dataclass(frozen=True)
class Regime:
    """A transformation of a call's floating-point inputs."""

    name: str
    inputs: str
    """How the inputs are described in a Reason ("output mismatch under inputs x64 ...")."""
    scale: float = 1.0
    heavy: bool = False
    """Times a heavy-tailed factor per element (and ``scale``)."""

    def changes(self, leaf: _Leaf) -> bool:
        """Whether this regime transforms an input array like ``leaf``."""
        if not leaf.varies:
            return False
        if self.heavy:
            return not (leaf.ordered or leaf.symmetric)
        return self.scale > 0 or not leaf.ordered


REGIMES = (
    Regime("scaled x1e-3", "inputs x1e-3", scale=1e-3),
    Regime("scaled x64", "inputs x64", scale=64.0),
    Regime("sign-flipped", "negated inputs", scale=-1.0),
    Regime("heavy-tailed", "inputs times a heavy-tailed factor", heavy=True),
)
"""One untimed call each per candidate and config, in this order."""


def applies() -> bool:
    """Regimes are checked by the judge's own comparison; a GPU MODE task's check judges
    its own data only, so none is made there."""
    return formats.task_check() is None


@dataclass
class RegimePlan:
    """One annotation's regime calls on one config: where each falls."""

    after: dict[int, list[Regime]]
    """Untimed fresh call (0: the config's first) -> the regimes called right after it."""
    post: list[Regime]
    """Regimes called after every annotation's last timed run."""
    fresh: int = -1

    def next_fresh(self) -> list[Regime]:
        """The regimes due after the fresh call just made."""
        self.fresh += 1
        return self.after.pop(self.fresh, [])


def draw_plan(
    rng: random.Random, untimed: int, regimes: tuple[Regime, ...] = REGIMES
) -> RegimePlan:
    """Each regime right after one of the ``untimed`` fresh calls before the timed runs,
    or after the timed runs, drawn from ``rng``; in ``regimes``' order either way."""
    wheres = sorted(rng.randrange(untimed + 1) for _ in regimes)
    plan = RegimePlan(after={}, post=[])
    for where, regime in zip(wheres, regimes, strict=True):
        if where < untimed:
            plan.after.setdefault(where, []).append(regime)
        else:
            plan.post.append(regime)
    return plan


# -- the inputs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Leaf:
    """What a regime may do to one input array (decided once per config)."""

    varies: bool
    """Floating point, and not alike in two draws of the input maker."""
    ordered: bool = False
    symmetric: bool = False


def _leaf(kind: str, a: Any, b: Any) -> _Leaf:
    """``a`` from one draw, ``b`` (the same place) from another."""
    if not _floating(kind, a):
        return _Leaf(varies=False)
    if array_kind(b) != kind or tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
        return _Leaf(varies=True)
    a, b = _plain(kind, a), _plain(kind, b)
    xp = _module(kind)
    same = xp.equal(a, b) if kind == "torch" else xp.array_equal(a, b)
    if bool(same):
        return _Leaf(varies=False)
    symmetric = False
    if len(a.shape) >= 2 and a.shape[-1] == a.shape[-2] >= 2:
        first = a.reshape(-1, *a.shape[-2:])[0]
        symmetric = bool((first[0] == first[:, 0]).all()) and bool((a == _swapped(kind, a)).all())
    ordered = (
        len(a.shape) >= 1
        and a.shape[-1] >= 2
        and _monotone(a.reshape(-1, a.shape[-1])[:1])
        and _monotone(a)
    )
    return _Leaf(varies=True, ordered=ordered, symmetric=symmetric)


def _plain(kind: str, a: Any) -> Any:
    """``a``, or a float32 copy of a torch array whose dtype has few ops (float8)."""
    if kind != "torch":
        return a
    xp = _module(kind)
    return a if a.dtype in (xp.float64, xp.float32, xp.float16, xp.bfloat16) else a.float()


def leaves_of(fresh: Inputs, draw: Inputs) -> list[_Leaf]:
    """Per input array of ``fresh`` (`array_leaves` order), what a regime may change;
    ``draw`` is another draw of the maker on the config."""
    mine = list(array_leaves(fresh))
    theirs = list(array_leaves(draw))
    if len(mine) != len(theirs):
        return [_Leaf(varies=_floating(kind, a)) for _, a, kind in mine]
    return [_leaf(kind, a, b) for (_, a, kind), (_, b, _) in zip(mine, theirs, strict=True)]


@dataclass(frozen=True)
class Transformed:
    """A call's inputs in a regime."""

    inputs: Inputs
    grew: float
    """The largest finite |value| of the arrays it changed, against the same before."""


def transform(
    regime: Regime, fresh: Inputs, leaves: list[_Leaf], rng: random.Random
) -> Transformed | None:
    """A copy of ``fresh`` with the arrays ``leaves`` lets ``regime`` change transformed;
    None when it changes none. Values stay within the dtype's finite range."""
    if len(leaves) != len(list(array_leaves(fresh))):
        return None
    copy = clone_args(fresh)
    before = after = 0.0
    changed = False
    for (_, a, kind), leaf in zip(array_leaves(copy), leaves, strict=True):
        if regime.changes(leaf) and int(a.numel() if kind == "torch" else a.size):
            before = max(before, _magnitude(a) or 0.0)
            _apply(regime, kind, a, rng.getrandbits(63))
            after = max(after, _magnitude(a) or 0.0)
            changed = True
    return Transformed(copy, ratio(after, before)) if changed else None


def _apply(regime: Regime, kind: str, a: Any, seed: int) -> None:
    """``a`` transformed in place, computed in float32 (float64 for float64 arrays)."""
    xp = _module(kind)
    if kind == "torch":
        wide = xp.float64 if a.dtype == xp.float64 else xp.float32
        x = a.detach().to(wide) * regime.scale
        if regime.heavy:
            gen = xp.Generator(device=a.device).manual_seed(seed)
            z = xp.randn(a.shape, generator=gen, device=a.device, dtype=wide)
            e = -xp.log1p(-xp.rand(a.shape, generator=gen, device=a.device, dtype=wide))
            x = x * (z / e.clamp_min(1e-12).sqrt()).abs()
        top = float(xp.finfo(a.dtype).max)
        with xp.no_grad():
            a.copy_(x.clamp(-top, top).to(a.dtype))
        return
    import numpy as np  # numpy and cupy arrays: the factor is drawn on the host

    wide_np = np.float64 if a.dtype == np.float64 else np.float32
    x = a.astype(wide_np) * regime.scale
    if regime.heavy:
        gen = np.random.default_rng(seed)
        z = gen.standard_normal(a.shape)
        e = gen.standard_exponential(a.shape)
        x = x * xp.asarray(np.abs(z / np.sqrt(np.maximum(e, 1e-12))).astype(wide_np))
    try:
        top = float(np.finfo(a.dtype).max)
    except (TypeError, ValueError):  # a dtype numpy's finfo does not know
        top = float("inf")
    a[...] = xp.clip(x, -top, top).astype(a.dtype)


# -- the reference's output, and the tolerance ------------------------------------------------


def _magnitude(leaf: Any) -> float | None:
    """The largest finite |value| of a floating array or number; None for anything else."""
    kind = array_kind(leaf)
    if kind is None:
        if isinstance(leaf, float) or type(leaf).__name__.startswith("float"):
            value = abs(float(leaf))
            return value if value < float("inf") else 0.0
        return None
    if not _floating(kind, leaf) or not int(leaf.numel() if kind == "torch" else leaf.size):
        return None
    xp = _module(kind)
    if kind == "torch":
        x = _plain(kind, leaf.detach()).abs()
        return float(xp.where(xp.isfinite(x), x, 0).max())
    x = xp.abs(leaf)
    return float(xp.where(xp.isfinite(x), x, 0).max())


def magnitudes(output: Any) -> dict[str, float]:
    """Path (``output``, ``output[1]``...) -> largest finite |value| of each floating leaf."""
    out = {}
    for path, leaf in walk(output, "output"):
        m = _magnitude(leaf)
        if m is not None and path is not None:
            out[path] = m
    return out


@dataclass(frozen=True)
class Nominal:
    """A config's first nominal expected output, as much as the regimes need of it."""

    magnitudes: dict[str, float]
    nonfinite: bool

    @property
    def overall(self) -> float:
        return max(self.magnitudes.values(), default=0.0)


def nominal_of(expected: Any) -> Nominal:
    return Nominal(magnitudes(expected), nonfinite(expected))


def ratio(regime: float | None, nominal: float | None) -> float:
    """How much larger the output is in the regime: 1 where either magnitude is 0 or unknown."""
    if not regime or not nominal:
        return 1.0
    return regime / nominal


def _tolerances(
    leaf: Any, atol: float | None, rtol: float | None, out: float, grew: float
) -> tuple[float | None, float | None]:
    """A floating leaf's tolerances in a regime: atol (the dtype's where None) times
    ``out``, the output's growth, but never below the smaller of atol and the dtype's
    smallest normal number (float16's atol already lies below it: rounding there is
    coarser than atol); rtol times ``grew``, the inputs' growth, where they grew."""
    if out == 1.0 and grew <= 1.0:
        return atol, rtol
    default = default_tolerance(str(getattr(leaf, "dtype", "float64")))
    if default is None and (atol is None or rtol is None):
        return atol, rtol  # the comparison says which tolerances to pass
    a = atol if atol is not None else default[0] if default else 0.0
    r = rtol if rtol is not None else default[1] if default else 0.0
    return max(a * out, min(a, _tiny(leaf))), r * max(1.0, grew)


def _tiny(leaf: Any) -> float:
    """The smallest normal number of a floating leaf's dtype."""
    kind = array_kind(leaf)
    if kind is None:
        return sys.float_info.min
    try:
        return float(_module(kind).finfo(leaf.dtype).tiny)
    except (TypeError, ValueError):
        return 0.0


def _pairs(e: Any, a: Any, path: str) -> Iterator[tuple[str, Any, Any]]:
    """(path, expected leaf, actual leaf), paired by the expected output's structure (the
    judge has checked that the two have the same); a container that does not pair up is
    one leaf, and its comparison says how it differs."""
    if isinstance(e, dict) and isinstance(a, Mapping) and set(e) == set(a):
        for k in e:
            yield from _pairs(e[k], a[k], f"{path}[{k!r}]")
    elif isinstance(e, list | tuple) and isinstance(a, list | tuple) and len(e) == len(a):
        for i, (x, y) in enumerate(zip(e, a, strict=True)):
            yield from _pairs(x, y, f"{path}[{i}]")
    else:
        yield path, e, a


@dataclass(frozen=True)
class RegimeCheck:
    """The check of one regime call: `judge_output`'s place, with the regime's tolerance."""

    regime: Regime
    config_id: int
    nominal: Nominal
    grew: float = 1.0
    """How much the inputs grew in the regime (`Transformed.grew`)."""

    def judge(
        self,
        tally: Tally,
        expected: Any,
        actual: Any,
        *,
        atol: float | None,
        rtol: float | None,
        bound: TrivialBound | None,
        inputs: Any = None,
    ) -> None:
        """Each array of the output against the reference's on the regime's inputs, with
        atol scaled by that array's magnitude against nominal and rtol by the inputs'
        (`_tolerances`); then the trivial-answer margin, scaled by the whole output's."""
        tally.calls += 1
        atol, rtol = tolerances(expected, atol, rtol)
        mine = magnitudes(expected)
        for path, e, a in _pairs(expected, actual, "output"):
            if path not in mine:  # no floating leaf: as the nominal check compares it
                diff = compare_outputs(e, a, atol=atol, rtol=rtol)
            else:
                by = ratio(mine[path], self.nominal.magnitudes.get(path))
                tol = _tolerances(e, atol, rtol, by, self.grew)
                diff = compare_outputs(e, a, atol=tol[0], rtol=tol[1])
            tally.add_errors(diff)
            reason = f"output mismatch: {path}{diff.reason.removeprefix('output')}"
            if not tally.add_mismatches(diff, reason):
                return
        if bound is not None:
            required = bound.required * ratio(max(mine.values(), default=0.0), self.nominal.overall)
            if tally.max_abs > required:
                tally.fail(
                    f"output mismatch: no better than a trivial answer: {bound.name} is within "
                    f"the tolerance on this config, so the output must be {TRIVIAL_MARGIN:g}x "
                    f"closer than it (here {required:.3g}); its max abs error is "
                    f"{tally.max_abs:.3g}"
                )

    def label(self, reason: str) -> str:
        where = f"regime '{self.regime.name}', config {self.config_id}"
        head = "output mismatch: "
        if reason.startswith(head):
            return f"output mismatch under {self.regime.inputs} ({where}): {reason[len(head) :]}"
        return f"{reason} (under {self.regime.inputs}: {where})"

    def fold(self, into: Tally, sub: Tally) -> None:
        """One regime call's verdict ``sub`` into the candidate's on the config: its call
        and its failures, each named for the regime. Its errors are not the nominal calls'
        max abs/rel errors (they are in the regime's units): only a failure's Reason
        carries them."""
        into.calls += sub.calls
        into.mismatches += sub.mismatches
        for reason in sub.reasons:
            into.fail(self.label(reason))
        if not sub.passed:
            into.passed = False
            if into.first_bad_index is None:
                into.first_bad_index = sub.first_bad_index


@dataclass
class ConfigRegimes:
    """One config's regime calls, for every candidate of the pass."""

    config_id: int
    nominal: Nominal
    plans: dict[str, RegimePlan] = field(default_factory=dict)
    leaves: list[_Leaf] | None = None
    """Per input array, what a regime may change (from the first regime call's draw)."""
    refused: dict[str, str] = field(default_factory=dict)
    """Regime name -> why the reference does not allow it on this config."""

    def plan(self, ann: str, rng: random.Random, untimed: int) -> RegimePlan:
        if ann not in self.plans:
            self.plans[ann] = draw_plan(rng, untimed)
        return self.plans[ann]

    def inputs(
        self, regime: Regime, fresh: Inputs, draw: Inputs, rng: random.Random
    ) -> Transformed | None:
        """``fresh`` (a draw of the config's inputs) in ``regime``; None when the regime
        changes none of them (``draw``: another draw, to tell fixed arrays)."""
        if self.leaves is None:
            self.leaves = leaves_of(fresh, draw)
        made = transform(regime, fresh, self.leaves, rng)
        if made is None:  # the same for every candidate: not tried again, nothing to note
            self.refused[regime.name] = "it changes no input"
        return made

    def expected(
        self, regime: Regime, inputs: Inputs, reference: Callable[[Inputs], Any]
    ) -> tuple[Any, str | None]:
        """The reference's output on ``inputs``, or (None, why the regime is not checked)."""
        try:
            out = reference(inputs)
        except Exception as exc:
            return None, self.refuse(regime, f"the reference raised {type(exc).__name__} there")
        if nonfinite(out) and not self.nominal.nonfinite:
            return None, self.refuse(regime, "the reference gives NaN or an infinity there")
        return out, None

    def refuse(self, regime: Regime, why: str) -> str:
        self.refused[regime.name] = why
        return (
            f"config {self.config_id}: {regime.inputs} (regime '{regime.name}') not checked: {why}"
        )

    def check(self, regime: Regime, made: Transformed) -> RegimeCheck:
        return RegimeCheck(regime, self.config_id, self.nominal, made.grew)
