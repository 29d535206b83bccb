"""Every candidate's place after the screen, and who goes on to the profile stage.

A candidate is ranked only if it passed the check on every config and the screen gave it a
speedup against the reference on every config; its score is the geometric mean of those
speedups (reference time / candidate time: lowest time wins). Candidates with a suspicious
screen row come after every clean one (an in-process timer is what a cheating candidate
would tamper with; ncu, outside the process, settles it if one is kept). Equal scores keep
the request's order. Failed, unchecked and unmeasured (NaN) candidates are never kept, and
`ScreenRank.Why` says why.
"""

from __future__ import annotations

import math

from nsight_core.request import ProfileRequest
from nsight_core.results import ProfileResult, ScreenRank


def rank_candidates(
    result: ProfileResult, request: ProfileRequest, metric: str, top_k: int
) -> list[ScreenRank]:
    """Every candidate's place after the screen (see the module docstring for the rules)."""
    configs = range(len(request.configs))
    scored: list[tuple[bool, float, int, str, str]] = []
    out: dict[str, ScreenRank] = {}
    for order, cand in enumerate(request.candidates):
        why = _not_rankable(result, cand, metric, configs)
        if why is not None:
            out[cand] = ScreenRank(Annotation=cand, Rank=None, Speedup=None, Kept=False, Why=why)
            continue
        speedups = [
            c.Speedup
            for c in result.comparisons
            if c.Annotation == cand and c.Metric == metric and c.Speedup is not None
        ]
        score = math.exp(sum(math.log(s) for s in speedups) / len(speedups))
        reasons = [
            reason
            for r in result.rows
            if r.Annotation == cand and r.Metric == metric and r.Trust == "suspicious"
            for reason in r.Reasons
        ]
        scored.append((bool(reasons), score, order, cand, brief(reasons)))
    scored.sort(key=lambda s: (s[0], -s[1], s[2]))
    clean = sum(1 for s in scored if not s[0])
    for rank, (suspicious, score, _, cand, doubt) in enumerate(scored, start=1):
        kept = rank <= top_k
        pace = f"{score:.3g}x the reference's speed in the screen"
        if kept and suspicious:
            why = (
                f"rank {rank}: {pace}; kept although its screen row is suspicious "
                f"({doubt}) because only {clean} clean candidate(s) passed; the profile "
                "stage measures it outside its process"
            )
        elif kept:
            why = f"rank {rank} of {len(scored)}: {pace}"
        elif suspicious:
            why = (
                f"rank {rank}: {pace}, but its screen row is suspicious ({doubt}), so "
                f"it ranks after the clean candidates, outside top_k={top_k}"
            )
        else:
            why = f"rank {rank}: {pace}, outside top_k={top_k}"
        out[cand] = ScreenRank(
            Annotation=cand,
            Rank=rank,
            Speedup=score,
            Suspicious=suspicious,
            Kept=kept,
            Why=why,
        )
    ranked = sorted(
        out.values(),
        key=lambda r: (r.Rank is None, r.Rank or 0, request.candidates.index(r.Annotation)),
    )
    return ranked


def brief(reasons: list[str], limit: int = 300) -> str:
    """A candidate's suspicion reasons, deduplicated, cut to `limit` characters."""
    text = " / ".join(dict.fromkeys(reasons))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _not_rankable(result: ProfileResult, cand: str, metric: str, configs: range) -> str | None:
    """Why a candidate cannot be ranked (failed, unchecked, unmeasured), or None."""
    failed = [f for f in result.failures if f.Annotation == cand]
    if failed:
        return f"failed in the screen: {failed[0].ErrorClass}: {failed[0].Error}"
    wrong = [c for c in result.correctness if c.Annotation == cand and not c.Passed]
    if wrong:
        first = wrong[0]
        what = first.Error or "; ".join(first.Reasons) or "output differs from the reference"
        return f"failed the check on config {first.ConfigId}: {first.ErrorClass or 'incorrect'}: {what}"
    checked = {c.ConfigId for c in result.correctness if c.Annotation == cand and c.Passed}
    missing_check = [i for i in configs if i not in checked]
    if missing_check and any(c.Annotation == cand for c in result.correctness):
        return f"not checked on config(s) {missing_check}: the screen ended before"
    measured = {
        c.ConfigId
        for c in result.comparisons
        if c.Annotation == cand
        and c.Metric == metric
        and c.Speedup is not None
        and math.isfinite(c.Speedup)
        and c.Speedup > 0
    }
    missing = [i for i in configs if i not in measured]
    if missing:
        return (
            f"no screen speedup on config(s) {missing} (not timed, or its runs or the "
            "reference's gave no value): not ranked"
        )
    return None


def next_ranked(ranking: list[ScreenRank], taken: set[str], n: int) -> list[str]:
    """The best `n` ranked candidates not in `taken` (those profiled already), in rank order:
    who is profiled in place of kept candidates whose screen ncu contradicted."""
    return [r.Annotation for r in ranking if r.Rank is not None and r.Annotation not in taken][
        : max(0, n)
    ]


def with_replacements(
    ranking: list[ScreenRank], displaced: dict[str, str], replacements: dict[str, str]
) -> list[ScreenRank]:
    """The ranking once the profile stage has doubted `displaced` (candidate -> what became
    of it) and profiled `replacements` (candidate -> whom it replaced)."""
    out: list[ScreenRank] = []
    for r in ranking:
        if r.Annotation in displaced:
            r = r.model_copy(
                update={
                    "Suspicious": True,
                    "Why": f"{r.Why}; profiled, but the profile stage contradicted its screen "
                    f"speedup beyond the noise (its rows' Reasons): {displaced[r.Annotation]}",
                }
            )
        elif r.Annotation in replacements:
            r = r.model_copy(
                update={
                    "Kept": True,
                    "Why": f"{r.Why}; profiled in place of {replacements[r.Annotation]}, whose "
                    "screen speedup the profile stage contradicted",
                }
            )
        out.append(r)
    return out
