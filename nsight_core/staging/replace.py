"""Replacing a kept candidate the screen overrated: the next-ranked one is profiled instead.

The cross-check (rows/crosscheck.py, rule 4) names each kept candidate whose screen Speedup
lies above the profile stage's beyond the noise of both; its place in the top k was won on
a number the profile stage contradicts, so an honest candidate may have been left out.
"""

from __future__ import annotations

from dataclasses import dataclass

from nsight_core.collectors import get_backend
from nsight_core.results import ProfileResult, StageReport
from nsight_core.rows.crosscheck import cross_check
from nsight_core.staging.budget import StageEta, no_time_reason, stage_status
from nsight_core.staging.context import StagedRun, StageUpdate
from nsight_core.staging.merge import absorbed, join, partial_result
from nsight_core.staging.ranking import next_ranked, with_replacements
from nsight_core.staging.requests import profile_request


@dataclass(frozen=True)
class Replaced:
    """The stages after replacing the candidates the screen overrated."""

    parts: tuple[ProfileResult, ProfileResult, StageReport, StageReport]
    """screen, profile stage's result, and the two stages' reports."""
    flags: list[str]


def replace_overrated(
    run: StagedRun,
    screen: ProfileResult,
    final: ProfileResult,
    screen_report: StageReport,
    profile_report: StageReport,
    overrated: dict[str, str],
    metric: str,
    eta: StageEta | None,
) -> Replaced:
    """Profile the next-ranked candidates in place of kept ones whose screen ncu contradicted.

    One more job under the final backend per round (the reference and the replacements, in
    `replace<n>/`), as long as ranked candidates are left, the job is not cancelled and the
    budget leaves time to time a call; a replacement the cross-check doubts in turn is
    replaced in the next round. Every kept candidate stays profiled, so top_k clean places
    are filled at most once each.
    """
    request = run.request
    taken = set(profile_report.Annotations)
    queue = list(overrated)
    fate: dict[str, str] = {}
    placed: dict[str, str] = {}
    flags: list[str] = []
    notes: list[str] = []
    status = profile_report.Status
    round_no = 0
    while queue:
        subs = next_ranked(screen_report.Ranking, taken, len(queue))
        cancelled = run.cancel is not None and run.cancel.is_set()
        why_not = (
            "no ranked candidate is left to profile in its place"
            if not subs
            else "the job was cancelled"
            if cancelled
            else no_time_reason(request, run.budget, eta, "a replacement job")
        )
        if why_not is not None:
            fate.update({d: f"not replaced: {why_not}" for d in queue})
            notes.append(f"{queue} not replaced: {why_not}")
            break
        round_no += 1
        fate.update({d: f"replaced by {s}" for d, s in zip(queue, subs, strict=False)})
        fate.update({d: "not replaced: no ranked candidate is left" for d in queue[len(subs) :]})
        placed.update({s: d for d, s in zip(queue, subs, strict=False)})
        taken.update(subs)
        limit = run.budget.limit()
        profile_report = profile_report.model_copy(
            update={"Annotations": [*profile_report.Annotations, *subs]}
        )
        partial = partial_result(
            run.result_id, run.created, [screen_report, profile_report], screen
        )
        run.started(
            StageUpdate("profile", 1, 2, run.final, run.timed_calls(1 + len(subs)), partial, eta)
        )
        where = f"replace{round_no}"
        extra = run.job(
            profile_request(request, run.final, subs, limit), run.job_dir / where, "profile"
        )
        checked = cross_check(
            screen, extra, screen_metric=metric, final_metric=get_backend(run.final).default_metric
        )
        screen, flags = checked.screen, flags + checked.flags
        final = absorbed(final, checked.final, request.reference, f"{where}_")
        job_status = stage_status(checked.final, run.budget.bound(limit))
        notes.append(
            f"the screen overrated {queue} ({run.final} contradicted it beyond the noise: see "
            f"their rows' Reasons); profiled {subs} in their place in {where}/: {job_status}"
        )
        if job_status != "done":
            status = job_status
            if job_status == "cancelled":
                final = final.model_copy(update={"status": "cancelled"})
            break
        queue = [c for c in checked.overrated if c in subs]
    screen_report = screen_report.model_copy(
        update={"Ranking": with_replacements(screen_report.Ranking, fate, placed)}
    )
    profile_report = profile_report.model_copy(
        update={"Status": status, "Reason": join(profile_report.Reason, *notes)}
    )
    return Replaced((screen, final, screen_report, profile_report), flags)
