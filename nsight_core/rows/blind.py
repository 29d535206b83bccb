"""Checks that passed with a reservation: rows and comparisons where the check could not vouch.

A candidate's check on a config either fails, with the reasons why, or passes. The judge
gives a passing check reasons of its own only where the check could not tell its answer
from one that does no work: another call's expected output (or zeros for part of the
output, where the reference's values there all sit within the tolerance of zero) passed
that config's check (judge/discrimination.py). There a candidate that ignores its inputs
(a constant near the expected value, an output learned from earlier calls) passes as well
as one that computes, so neither its rows' numbers nor their ratio to the reference can be
acted on. For every passed check with reasons:

- the candidate's rows on that config are `suspicious`, with the reasons (the reference's
  rows stand: its calls are trusted whatever the check can tell);
- its comparisons there are not `Resolvable` (null), with the reasons: however clear the
  interval, it may compare the reference with an answer that does no work;
- the result's message says it once per reason, which names the config and why.
"""

from __future__ import annotations

from collections.abc import Sequence

from nsight_core.protocol import CheckEvent
from nsight_core.results import Comparison, Row, suspected


def reservations(checks: Sequence[CheckEvent]) -> dict[tuple[str, int], list[str]]:
    """(candidate, config) -> the reasons of a check that passed all the same."""
    return {(c.annotation, c.config_id): c.reasons for c in checks if c.passed and c.reasons}


def blind_rows(rows: list[Row], checks: Sequence[CheckEvent]) -> list[Row]:
    """Rows of a check that passed with reasons: suspicious for those reasons."""
    held = reservations(checks)
    out = []
    for r in rows:
        for reason in held.get((r.Annotation, r.ConfigId), []):
            r = suspected(r, reason)
        out.append(r)
    return out


def blind_comparisons(
    comparisons: list[Comparison], checks: Sequence[CheckEvent]
) -> list[Comparison]:
    """Comparisons of a check that passed with reasons: not resolvable, and why."""
    held = reservations(checks)
    out = []
    for c in comparisons:
        reasons = held.get((c.Annotation, c.ConfigId))
        if reasons:
            more = [r for r in reasons if r not in c.Reasons]
            c = c.model_copy(update={"Resolvable": None, "Reasons": [*c.Reasons, *more]})
        out.append(c)
    return out


def blind_message(checks: Sequence[CheckEvent]) -> str:
    """The result message's part about them (each reason once); empty when there is none."""
    said = dict.fromkeys(r for reasons in reservations(checks).values() for r in reasons)
    return "; ".join(said)
