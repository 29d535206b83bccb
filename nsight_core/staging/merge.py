"""One result of a staged request: the stages' rows marked with their stage, what
read_results shows while a stage runs, and the final merge with its message."""

from __future__ import annotations

from collections.abc import Sequence

from nsight_core.request import ProfileRequest
from nsight_core.results import (
    Correctness,
    JobStatus,
    ProfileResult,
    Provenance,
    StageName,
    StageReport,
    iso,
    utc_now,
)
from nsight_core.staging.requests import SCREEN_CHECK_NOTE


def tagged(result: ProfileResult, stage: StageName, reference: str) -> ProfileResult:
    """Every row, comparison, check and failure of `result` marked with the stage; a
    candidate's screen checks say what they left to the profile stage."""
    mark = {"Stage": stage}

    def checked(c: Correctness) -> Correctness:
        if stage != "screen" or c.Annotation == reference:
            return c.model_copy(update=mark)
        return c.model_copy(update={**mark, "Reasons": [*c.Reasons, SCREEN_CHECK_NOTE]})

    return result.model_copy(
        update={
            "rows": [r.model_copy(update=mark) for r in result.rows],
            "comparisons": [c.model_copy(update=mark) for c in result.comparisons],
            "correctness": [checked(c) for c in result.correctness],
            "failures": [f.model_copy(update=mark) for f in result.failures],
            "error": result.error.model_copy(update=mark) if result.error is not None else None,
        }
    )


def partial_result(
    result_id: str, created: str, reports: list[StageReport], screen: ProfileResult | None
) -> ProfileResult:
    """What read_results shows while a stage runs: the finished stages and every stage's state."""
    running = next((r for r in reports if r.Status == "running"), None)
    message = f"stage {running.Stage} running under {running.Backend}" if running else "running"
    if screen is None:
        return ProfileResult(
            result_id=result_id,
            status="running",
            message=message,
            created_at=created,
            stages=reports,
        )
    return screen.model_copy(
        update={
            "status": "running",
            "message": f"{message}; the screen's rows are below",
            "finished_at": None,
            "stages": reports,
        }
    )


def merged(
    request: ProfileRequest,
    result_id: str,
    created: str,
    screen: ProfileResult | None,
    final: ProfileResult | None,
    reports: list[StageReport],
    *,
    wall_s: float,
    flags: Sequence[str] = (),
    notes: Sequence[str] = (),
) -> ProfileResult:
    """One result: the profile stage's rows first (the numbers to report), then the screen's.

    `screen` is None when the screen was skipped (`final` then holds every candidate);
    `notes` go into the provenance's notes.
    """
    screen_report, profile_report = reports
    parts = _message_parts(request, screen_report, profile_report, flags)
    base = final if final is not None else screen
    assert base is not None, "a staged result needs at least one stage's result"
    status: JobStatus
    if final is not None:
        status = final.status
    elif base.status in ("failed", "cancelled"):
        status = base.status
    else:
        status = "done"
    parts.append(base.message)
    provenance = _provenance(base.provenance, reports, wall_s, notes)
    artifacts = dict(final.artifacts) if final is not None else {}
    stages = [r for r in (final, screen) if r is not None]
    if screen is not None:
        artifacts.update({f"screen_{k}": v for k, v in screen.artifacts.items()})
    return base.model_copy(
        update={
            "result_id": result_id,
            "status": status,
            "message": "; ".join(p for p in parts if p),
            "created_at": created,
            "finished_at": iso(utc_now()),
            "rows": [x for r in stages for x in r.rows],
            "comparisons": [x for r in stages for x in r.comparisons],
            "correctness": [x for r in stages for x in r.correctness],
            "failures": [x for r in stages for x in r.failures],
            "error": base.error,
            "provenance": provenance,
            "artifacts": artifacts,
            "stages": reports,
        }
    )


def _message_parts(
    request: ProfileRequest,
    screen_report: StageReport,
    profile_report: StageReport,
    flags: Sequence[str],
) -> list[str]:
    """What the stages did, for the result's message (the last stage's message follows)."""
    if screen_report.Status == "skipped":
        return [
            f"staged: screen skipped: {screen_report.Reason}; the profile stage "
            f"({profile_report.Backend}) checked and measured the reference and all "
            f"{len(request.candidates)} candidate(s): {profile_report.Status}"
            + (f" ({profile_report.Reason})" if profile_report.Reason else "")
        ]
    ranking = screen_report.Ranking
    passed = [r for r in ranking if r.Rank is not None]
    top_k = request.stages.top_k if request.stages is not None else 0
    kept = [r.Annotation for r in ranking if r.Kept and r.Rank is not None and r.Rank <= top_k]
    extra = [r.Annotation for r in ranking if r.Kept and r.Annotation not in kept]
    parts = [
        f"staged: the screen ({screen_report.Backend}) checked and timed "
        f"{len(request.candidates)} candidate(s), {len(passed)} passed and were ranked"
    ]
    if screen_report.Reason:
        parts.append(f"screen: {screen_report.Reason}")
    if profile_report.Status == "skipped":
        parts.append(f"profile stage skipped: {profile_report.Reason}")
    else:
        instead = f", and {extra} in place of kept ones the screen overrated" if extra else ""
        parts.append(
            f"kept the top {len(kept)} {kept} for the profile stage ({profile_report.Backend})"
            f"{instead}: {profile_report.Status}"
            + (f" ({profile_report.Reason})" if profile_report.Reason else "")
        )
    left_out = [r for r in ranking if not r.Kept]
    if left_out:
        parts.append(
            "left out: "
            + "; ".join(f"{r.Annotation}: {r.Why}" for r in left_out[:8])
            + ("; ..." if len(left_out) > 8 else "")
        )
    if flags:
        parts.append(
            f"cross-check: {len(flags)} disagreement(s) between the screen and the profile "
            f"stage ({'; '.join(flags[:5])}{'; ...' if len(flags) > 5 else ''}): see the "
            "profile rows' Reasons and CrossCheck"
        )
    return parts


def absorbed(
    final: ProfileResult, extra: ProfileResult, reference: str, prefix: str
) -> ProfileResult:
    """The profile stage's result with a later profile job's candidates added.

    The later job measured the reference again, for its own paired comparisons; those
    reference rows and checks are left out (the first job's stand, one row per key), and
    its files are listed under `prefix`.
    """
    return final.model_copy(
        update={
            "rows": final.rows + [r for r in extra.rows if r.Annotation != reference],
            "comparisons": final.comparisons + extra.comparisons,
            "correctness": final.correctness
            + [c for c in extra.correctness if c.Annotation != reference],
            "failures": final.failures + extra.failures,
            "artifacts": final.artifacts | {f"{prefix}{k}": v for k, v in extra.artifacts.items()},
        }
    )


def _provenance(
    base: Provenance | None, reports: list[StageReport], wall_s: float, extra: Sequence[str]
) -> Provenance | None:
    if base is None:
        return None
    phases = dict(base.phase_seconds)
    notes = [*base.notes, *extra]
    for r in reports:
        if r.WallSeconds is not None:
            phases[f"stage_{r.Stage}"] = r.WallSeconds
        notes.append(
            f"stage {r.Stage} ({r.Backend}): {r.Status}" + (f": {r.Reason}" if r.Reason else "")
        )
    return base.model_copy(
        update={"phase_seconds": phases, "wall_seconds": round(wall_s, 3), "notes": notes}
    )


def join(*parts: str | None) -> str | None:
    text = "; ".join(p for p in parts if p)
    return text or None
