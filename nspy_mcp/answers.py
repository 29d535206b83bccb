"""How the tools' answers are shaped: narrowed, compact by default, with the next step named.

An agent reads every answer in its context window, so answers are compact unless it asks
for detail='full': raw per-run values are left out and tracebacks keep only the frames
nearest the error. Every answer says what to call next (a cursor, a result_id, detail).
"""

from __future__ import annotations

from datetime import UTC, datetime

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, ConfigDict, Field

from nsight_core.results import Failure, ProfileResult
from nsight_core.store.result_store import ResultFilter, ResultStore, ResultSummary

COMPACT_TRACEBACK_LINES = 12
"""Traceback lines kept in compact answers: the frames nearest the error, where the cause
usually is; detail='full' returns all of them."""


class ReadResultsAnswer(BaseModel):
    """A stored result (with result_id) or a page of past results (without)."""

    model_config = ConfigDict(extra="forbid")

    result: ProfileResult | None = Field(
        None,
        description=(
            "The result asked for by result_id; rows, comparisons, correctness and failures "
            "narrowed by annotation/config_id/metric. Raw per-run values only with detail='full'."
        ),
    )
    results: list[ResultSummary] = Field(
        default_factory=list, description="Past results, newest first (when no result_id)."
    )
    total: int | None = Field(None, description="How many stored results match the filters.")
    next_cursor: str | None = Field(
        None, description="Pass this as `cursor` to get the next page; null on the last page."
    )
    message: str = Field(description="What this answer holds and what to call next.")


def _trim_traceback(tb: str) -> str:
    lines = tb.rstrip("\n").splitlines()
    if len(lines) <= COMPACT_TRACEBACK_LINES:
        return tb
    cut = len(lines) - COMPACT_TRACEBACK_LINES
    kept = "\n".join(lines[-COMPACT_TRACEBACK_LINES:])
    return f"[{cut} earlier traceback lines cut; detail='full' has them]\n{kept}"


def compact_failure(f: Failure) -> Failure:
    """The failure with its traceback cut to the last `COMPACT_TRACEBACK_LINES` lines."""
    return f.model_copy(update={"Traceback": _trim_traceback(f.Traceback)})


def shape_result(
    result: ProfileResult,
    *,
    full: bool,
    annotation: str | None = None,
    config_id: int | None = None,
    metric: str | None = None,
) -> ProfileResult:
    """Narrow a result to the filters; compact drops raw per-run values and long tracebacks."""

    def keep(ann: str | None, cid: int | None, met: str | None = None) -> bool:
        return (
            (annotation is None or ann is None or ann == annotation)
            and (config_id is None or cid is None or cid == config_id)
            and (metric is None or met is None or met == metric)
        )

    rows = [r for r in result.rows if keep(r.Annotation, r.ConfigId, r.Metric)]
    comparisons = [
        c
        for c in result.comparisons
        if keep(c.Annotation, c.ConfigId, c.Metric) or keep(c.Baseline, c.ConfigId, c.Metric)
    ]
    correctness = [c for c in result.correctness if keep(c.Annotation, c.ConfigId)]
    failures = [f for f in result.failures if keep(f.Annotation, f.ConfigId)]
    error = result.error
    if not full:
        rows = [r.model_copy(update={"RawValues": []}) for r in rows]
        failures = [compact_failure(f) for f in failures]
        error = compact_failure(error) if error is not None else None
    return result.model_copy(
        update={
            "rows": rows,
            "comparisons": comparisons,
            "correctness": correctness,
            "failures": failures,
            "error": error,
        }
    )


def _sentence(text: str) -> str:
    text = text.rstrip()
    return text if text.endswith((".", "!", "?")) else text + "."


def verdict_text(result: ProfileResult) -> str:
    """What to act on: resolvable comparisons; what noisy rows change: wider intervals.

    One story everywhere (this message, the prompt, the server instructions, AGENTS.md):
    a Resolvable comparison is the verdict; a 'noisy' row is usable but widens the
    interval, so fewer comparisons resolve and more runs tighten it; 'suspicious' and
    'failed' rows are not acted on.
    """
    parts: list[str] = []
    speedups = [c for c in result.comparisons if c.Speedup is not None]
    if speedups:
        resolvable = [c for c in speedups if c.Resolvable]
        parts.append(
            f"{len(resolvable)} of {len(speedups)} comparison(s) are Resolvable (the speedup's "
            "95 % interval excludes 1.0): act on those; the others are within noise"
        )
    noisy = sum(1 for r in result.rows if r.Trust == "noisy")
    if noisy:
        more = min(1000, 2 * max(r.RequestedRuns for r in result.rows))
        parts.append(
            f"{noisy} noisy row(s): usable, but their spread widens the intervals so fewer "
            f"comparisons resolve; add runs (e.g. runs={more}) to tighten them"
        )
    doubtful = sum(1 for r in result.rows if r.Trust in ("suspicious", "failed"))
    if doubtful:
        parts.append(
            f"{doubtful} suspicious/failed row(s): do not act on them; their Reasons say why"
        )
    return " ".join(_sentence(p[0].upper() + p[1:]) for p in parts)


def with_next_step(result: ProfileResult) -> ProfileResult:
    """A finished result's message, what to act on, and how to get the raw values left out."""
    if result.status in ("queued", "running") or not result.rows:
        return result
    verdict = verdict_text(result)
    hint = f"Raw per-run values: read_results(result_id='{result.result_id}', detail='full')."
    message = " ".join(p for p in (_sentence(result.message or result.status), verdict, hint) if p)
    return result.model_copy(update={"message": message})


def result_answer(
    result: ProfileResult,
    *,
    full: bool,
    annotation: str | None,
    config_id: int | None,
    metric: str | None,
) -> ReadResultsAnswer:
    """read_results' answer for one result: shaped, and saying how much of it is shown."""
    shaped = shape_result(
        result, full=full, annotation=annotation, config_id=config_id, metric=metric
    )
    narrowed = [
        f"{k}={v!r}"
        for k, v in (("annotation", annotation), ("config_id", config_id), ("metric", metric))
        if v is not None
    ]
    message = _sentence(f"result {result.result_id} is {result.status}: {result.message}")
    if result.rows:
        verdict = verdict_text(shaped)
        if verdict:
            message += f" {verdict}"
        message += f" Showing {len(shaped.rows)} of {len(result.rows)} row(s)"
        message += f" ({', '.join(narrowed)})." if narrowed else "."
        if not full:
            message += " detail='full' adds raw per-run values."
    return ReadResultsAnswer(result=shaped, message=message)


def listing(
    store: ResultStore, filt: ResultFilter, *, limit: int, cursor: str | None
) -> ReadResultsAnswer:
    """read_results' answer without a result_id: one page of summaries and the next cursor."""
    page = store.query(filt, limit=limit, cursor=cursor)
    if page.next_cursor is not None:
        more = f"call read_results with the same filters and cursor='{page.next_cursor}' for the next page"
    else:
        more = "this is the last page"
    message = (
        f"{len(page.summaries)} of {page.total} matching result(s), newest first; {more}. "
        "Read one with read_results(result_id=...)."
    )
    return ReadResultsAnswer(
        results=page.summaries, total=page.total, next_cursor=page.next_cursor, message=message
    )


def parse_time(name: str, value: str | None) -> datetime | None:
    """A listing's since/until as an aware datetime (UTC if no zone); a ToolError if unparsable."""
    if value is None:
        return None
    try:
        dt = datetime.fromisoformat(value.strip())
    except ValueError as exc:
        raise ToolError(
            f"invalid_request: {name}={value!r} is not an ISO 8601 time; "
            "use e.g. '2026-12-01T12:00:00Z' or '2026-12-01'"
        ) from exc
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)
