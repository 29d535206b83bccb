"""What a listing shows of a stored result, and how the index is searched for one.

A summary is what the index keeps per result, so a listing never reads a result's files:
enough to choose which one to read in full (status, candidates, metrics, one headline per
candidate with its correctness and speedup range). `summary_of` and `index_keys` make a
result's index entry, `query_page` answers a filtered, paged listing from the index.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from nsight_core.collectors import get_backend
from nsight_core.request import ProfileRequest
from nsight_core.results import JobStatus, ProfileResult
from nsight_core.settings import JobSettings
from nsight_core.store.files import validate_result_id


class ResultSummary(BaseModel):
    """One past result in a listing: enough to choose which one to read in full."""

    model_config = ConfigDict(extra="forbid")

    result_id: str
    status: JobStatus
    created_at: str = Field(description="When the job was queued (ISO 8601, UTC).")
    finished_at: str | None = None
    backend: str
    reference: str
    candidates: list[str]
    num_configs: int
    metrics: list[str] = Field(description="Metrics measured (requested ones until it finishes).")
    message: str = ""
    num_rows: int = 0
    num_failures: int = 0
    headlines: list[str] = Field(
        default_factory=list,
        description="One line per candidate: correctness and speedup range over configs.",
    )


@dataclass(frozen=True)
class ResultFilter:
    """Which results a listing returns; every field that is set must match."""

    status: JobStatus | None = None
    annotation: str | None = None
    config_id: int | None = None
    metric: str | None = None
    since: datetime | None = None
    until: datetime | None = None


@dataclass(frozen=True)
class ResultPage:
    """A page of a listing, newest first; pass `next_cursor` to get the next one."""

    summaries: list[ResultSummary]
    next_cursor: str | None
    total: int


def _speedup_span(values: Sequence[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.3g}x" if abs(hi - lo) < 5e-4 * max(abs(hi), 1e-12) else f"{lo:.3g}x..{hi:.3g}x"


def headlines(result: ProfileResult, request: ProfileRequest) -> list[str]:
    lines = []
    for cand in request.candidates:
        checks = [c for c in result.correctness if c.Annotation == cand]
        failed = [c for c in checks if not c.Passed]
        comps = [c for c in result.comparisons if c.Annotation == cand and c.Speedup is not None]
        parts = []
        if failed:
            classes = sorted({str(c.ErrorClass or "incorrect") for c in failed})
            parts.append(
                f"failed check on {len(failed)}/{len(checks)} configs ({', '.join(classes)})"
            )
        elif checks:
            parts.append("correct")
        if comps:
            resolvable = sum(1 for c in comps if c.Resolvable)
            span = _speedup_span([c.Speedup for c in comps if c.Speedup is not None])
            parts.append(f"speedup {span} ({resolvable}/{len(comps)} resolvable)")
        if parts:
            lines.append(f"{cand}: " + "; ".join(parts))
    return lines


def measured_metrics(request: ProfileRequest) -> list[str]:
    return get_backend(request.backend).measures(JobSettings.of_request(request))


def summary_of(result: ProfileResult, request: ProfileRequest) -> ResultSummary:
    """The index's summary of a result: what a listing shows of it."""
    return ResultSummary(
        result_id=result.result_id,
        status=result.status,
        created_at=result.created_at,
        finished_at=result.finished_at,
        backend=request.backend,
        reference=request.reference,
        candidates=list(request.candidates),
        num_configs=len(request.configs),
        metrics=sorted({r.Metric for r in result.rows}) or measured_metrics(request),
        message=result.message,
        num_rows=len(result.rows),
        num_failures=len(result.failures) + (1 if result.error else 0),
        headlines=headlines(result, request),
    )


def index_keys(result: ProfileResult, request: ProfileRequest) -> list[tuple[str, int, str]]:
    """(annotation, config_id, metric) a listing finds the result by: its rows', or the
    request's before it has rows."""
    if result.rows:
        keys = sorted({(r.Annotation, r.ConfigId, r.Metric) for r in result.rows})
    else:
        keys = [
            (a, c, m)
            for a in request.annotations
            for c in range(len(request.configs))
            for m in measured_metrics(request)
        ]
    return keys


def query_page(
    connect: Callable[[], AbstractContextManager[sqlite3.Connection]],
    filt: ResultFilter | None = None,
    *,
    limit: int = 20,
    cursor: str | None = None,
) -> ResultPage:
    """Results matching `filt` in the index ``connect`` opens, newest first; `cursor` is a
    page's `next_cursor`."""
    filt = filt or ResultFilter()
    if limit < 1:
        raise ValueError("limit must be >= 1")
    where: list[str] = ["1 = 1"]
    args: list[object] = []
    if filt.status is not None:
        where.append("r.status = ?")
        args.append(filt.status)
    if filt.since is not None:
        where.append("r.created_ts >= ?")
        args.append(filt.since.timestamp())
    if filt.until is not None:
        where.append("r.created_ts <= ?")
        args.append(filt.until.timestamp())
    key_terms = [
        (col, val)
        for col, val in (
            ("annotation", filt.annotation),
            ("config_id", filt.config_id),
            ("metric", filt.metric),
        )
        if val is not None
    ]
    if key_terms:
        cond = " AND ".join(f"k.{col} = ?" for col, _ in key_terms)
        where.append(
            f"EXISTS (SELECT 1 FROM result_keys k WHERE k.result_id = r.result_id AND {cond})"
        )
        args.extend(val for _, val in key_terms)
    base = " AND ".join(where)
    page_where, page_args = base, list(args)
    if cursor is not None:
        page_where += " AND r.result_id < ?"
        page_args.append(validate_result_id(cursor))
    with connect() as db:
        total = db.execute(f"SELECT COUNT(*) FROM results r WHERE {base}", args).fetchone()[0]
        rows = db.execute(
            f"SELECT summary FROM results r WHERE {page_where} ORDER BY r.result_id DESC LIMIT ?",
            [*page_args, limit + 1],
        ).fetchall()
    summaries = [ResultSummary.model_validate_json(r[0]) for r in rows[:limit]]
    more = len(rows) > limit
    return ResultPage(
        summaries=summaries,
        next_cursor=summaries[-1].result_id if more and summaries else None,
        total=int(total),
    )
