"""Whether a config's check can tell a computed answer from one that ignores the inputs.

The check compares each output with the reference's on that call's inputs, within a
tolerance. Where the reference's output hardly depends on the inputs the input maker
gives, an answer that ignores them passes: a 0-d loss over many i.i.d. elements answered
with its expected value, rows whose answer the inputs' structure fixes answered from an
earlier call, an output whose values all sit within atol of zero answered with anything of
its shape and rough size. The trivial-answer bound (verdict.py) misses these: a learned
answer is no trivial answer, a constant 0-d output is exact and skipped, and a small part
of a larger output is not scored on its own. So the judge asks the question directly, on
the expected outputs it makes anyway: does the expected output of a config's first fresh
call pass the check of a later fresh call (its tolerance with the trivial-answer bound, or
a GPU MODE task's own check)? For an output of several arrays, each array is asked on its
own too, and so are zeros in its place. An output (or an array of it) that every call
gives alike, bit for bit, is a constant, not a blind spot: a constant answer is right there
(a maker that ignores the seed, a function of the shapes alone), as verdict.py skips exact
trivial answers.

It must pass on each of `BLIND_PAIRS` later calls (fewer only where the config has fewer),
so a chance agreement (two argmaxes that happen to match) seldom counts, while an answer
that ignores the inputs must pass on every call a candidate makes. What it cannot tell it
says, never failing anyone: every check that passes on that config carries the reason
(which names the config and why), and the parent makes those candidates' rows there
suspicious and their speedups unresolvable (rows/blind.py). An honest candidate there
cannot be told from one that does no work; the fix is the user's (a tighter tolerance,
inputs the output depends on).

The cost: per config, the first fresh expected output is kept until the question is
answered, which takes one comparison with each later fresh expected output (the first
that fails ends it), per array and against zeros for an output of several arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nsight_core.judge.verdict import Tally, TrivialBound, judge_output, tolerances
from nsight_core.runtime import formats
from nsight_core.runtime.check import OutputDiff, compare_outputs
from nsight_core.runtime.leaves import array_leaves

BLIND_PAIRS = 2
"""Later fresh calls whose check the first call's expected output must pass, each."""


@dataclass
class Discrimination:
    """One config's question, asked on its fresh expected outputs as they come."""

    config_id: int
    pairs: int = BLIND_PAIRS
    """Later fresh calls to ask on (fewer where the config makes fewer)."""
    first: Any = None
    asked: int = 0
    passing: dict[str, Answer] = field(default_factory=dict)
    """What passed on every call asked so far."""
    decided: bool = False

    def feed(
        self,
        expected: Any,
        inputs: Any,
        *,
        atol: float | None,
        rtol: float | None,
        bound: TrivialBound | None,
    ) -> str | None:
        """Take one fresh call's expected output; the reason once the config is found
        blind (once only), else None."""
        if self.decided:
            return None
        if self.first is None:
            self.first = expected
            self.decided = self.pairs < 1
            return None
        now = passing_answers(expected, self.first, inputs, atol=atol, rtol=rtol, bound=bound)
        if self.asked:
            now = {k: a.after(self.passing[k]) for k, a in now.items() if k in self.passing}
        self.passing, self.asked = now, self.asked + 1
        if self.passing and self.asked < self.pairs:
            return None
        self.decided, self.first = True, None  # nothing more to keep it for
        # An output every call gives alike, bit for bit, is a constant function's (or a
        # maker's that ignores the seed): a constant answer is then right, as verdict.py
        # skips exact trivial answers.
        moved = [a for a in self.passing.values() if a.moved]
        if not moved:
            return None
        what, detail = moved[0].what, moved[0].detail
        checks = (
            "a later call's check" if self.asked == 1 else f"the checks of {self.asked} later calls"
        )
        return (
            f"config {self.config_id}'s check cannot tell a computed answer from one that "
            f"ignores the inputs: {what} passed {checks} ({detail}), so "
            "an answer that ignores them (a constant, an output learned from earlier calls) "
            "passes too, and its speedups are not resolvable. To fix: tighten atol/rtol "
            "below how much the output changes between inputs, or make inputs the output "
            "depends on"
        )


@dataclass(frozen=True)
class Answer:
    """An answer that ignores a call's inputs and passed its check."""

    what: str
    detail: str
    moved: bool = True
    """It was not bit for bit the expected output (on some call asked so far)."""

    def after(self, before: Answer) -> Answer:
        return Answer(self.what, self.detail, self.moved or before.moved)


def passing_answers(
    expected: Any,
    other: Any,
    inputs: Any,
    *,
    atol: float | None,
    rtol: float | None,
    bound: TrivialBound | None,
) -> dict[str, Answer]:
    """Answers that ignore this call's inputs and pass its check: ``other`` (another call's
    expected output) whole, and, for an output of several arrays, each of its arrays and
    zeros in each array's place (neither where it is exact: a constant part). The whole
    output first."""
    out: dict[str, Answer] = {}
    tally = Tally()
    judge_output(tally, expected, other, atol=atol, rtol=rtol, bound=bound, inputs=inputs)
    if tally.passed:
        err = tally.max_abs
        out["output"] = Answer("one call's expected output", f"max abs error {err:.3g}", err > 0)
    if formats.task_check() is not None:
        return out  # the task's check decides on whole outputs only
    mine = list(array_leaves(expected, "output"))
    theirs = list(array_leaves(other, "output"))
    if len(mine) < 2 or [p for p, _, _ in mine] != [p for p, _, _ in theirs]:
        return out
    a, r = tolerances(expected, atol, rtol)
    for (path, e, _), (_, o, _) in zip(mine, theirs, strict=True):
        diff = compare_outputs(e, o, atol=a, rtol=r)
        if diff.max_abs_error != 0.0 and _within(diff, bound):  # an exact part is a constant
            out[f"{path}"] = Answer(
                f"{path} of one call", f"max abs error {diff.max_abs_error:.3g}"
            )
        if _floating(e):
            zeros = compare_outputs(e, e * 0, atol=a, rtol=r)
            if zeros.max_abs_error != 0.0 and _within(zeros, bound):
                out[f"zeros {path}"] = Answer(
                    f"zeros in place of {path}", "its values are all within the tolerance of zero"
                )
    return out


def replay_passes(
    expected: Any,
    earlier: Any,
    *,
    atol: float | None,
    rtol: float | None,
    bound: TrivialBound | None,
) -> bool:
    """Whether ``earlier`` (an output for other inputs) passes the check against
    ``expected``: its tolerance, and the trivial-answer margin where one applies."""
    a, r = tolerances(expected, atol, rtol)
    return _within(compare_outputs(expected, earlier, atol=a, rtol=r), bound)


def _within(diff: OutputDiff, bound: TrivialBound | None) -> bool:
    """Passes the tolerance and, where a trivial answer passes on this config, the margin
    every candidate's output must keep below it (verdict.py)."""
    if not diff.passed or diff.max_abs_error is None:
        return False
    return bound is None or diff.max_abs_error <= bound.required


def _floating(x: Any) -> bool:
    dtype = getattr(x, "dtype", None)
    return bool(getattr(dtype, "is_floating_point", False)) or str(dtype).startswith(
        ("float", "bfloat")
    )
