"""How the tools' answers are shaped: narrowed, compact by default, with the next step named.

An agent reads every answer in its context window, so answers are compact unless it asks
for detail='full': raw per-run values are left out and tracebacks keep only the frames
nearest the error. Every answer says what to call next (a cursor, a result_id, detail).

A compact answer also fits `ANSWER_BYTES`, whatever the job's size: hosts show the model
either the text or the structured content (some only the latter), so both are one JSON
document of at most that size. A result that does not fit keeps what an agent acts on first
(failures, comparisons, failed checks), then rows; its message says what was left out and
where everything is (`links`), and the answer carries resource links to it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ContentBlock, ResourceLink, TextContent
from pydantic import BaseModel, ConfigDict, Field

from nsight_core.host.catalog import MetricsValidation
from nsight_core.results import Failure, ProfileResult
from nsight_core.store.result_store import ResultFilter, ResultStore, ResultSummary
from nspy_mcp.links import full_data_text, result_links

COMPACT_TRACEBACK_LINES = 12
"""Traceback lines kept in compact answers: the frames nearest the error, where the cause
usually is; detail='full' returns all of them."""

ANSWER_BYTES = 16_000
"""Most bytes of a compact answer's JSON: under 16 KB (16,384), docs/tools.md's limit per answer. Its
text is the same JSON, so text and structured content both fit."""

_NOTE_BYTES = 800
"""Room kept for the sentence that says what a cut answer left out."""


class ReadResultsAnswer(BaseModel):
    """A stored result (with result_id) or a page of past results (without)."""

    model_config = ConfigDict(extra="forbid")

    result: ProfileResult | None = Field(
        None,
        description="The result_id's result, narrowed by annotation, config_id and metric.",
    )
    results: list[ResultSummary] = Field(
        default_factory=list, description="Without result_id: newest first."
    )
    total: int | None = Field(None, description="Stored results matching the filters.")
    next_cursor: str | None = Field(
        None, description="`cursor` of the next page; null on the last."
    )
    message: str = Field(description="What this holds and what to call next.")


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
            "95 % interval excludes 1.0; on a CPU, by more than the runs' noise): act on those; the others are within noise"
        )
    noisy = sum(1 for r in result.rows if r.Trust == "noisy")
    if noisy:
        more = min(1000, 2 * max(r.RequestedRuns for r in result.rows))
        parts.append(
            f"{noisy} noisy row(s) (spread or GPU clock: see Reasons): usable, but wider "
            "intervals make fewer "
            f"comparisons resolve; add runs (e.g. runs={more}) to tighten them"
        )
    doubtful = sum(1 for r in result.rows if r.Trust in ("suspicious", "failed"))
    if doubtful:
        parts.append(
            f"{doubtful} suspicious/failed row(s): do not act on them; their Reasons say why"
        )
    return " ".join(_sentence(p[0].upper() + p[1:]) for p in parts)


def with_next_step(result: ProfileResult) -> ProfileResult:
    """A finished result's message, what to act on, and where the data left out is."""
    if result.status in ("queued", "running"):
        return result
    parts = [_sentence(result.message or result.status)]
    if result.rows:
        parts.append(verdict_text(result))
        parts.append(
            f"Raw per-run values: read_results(result_id='{result.result_id}', detail='full')."
        )
    parts.append(full_data_text(result.result_id, rows=bool(result.rows)))
    return result.model_copy(update={"message": " ".join(p for p in parts if p)})


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _size(value: Any) -> int:
    return len(_json(value).encode())


def _failed_check(item: dict[str, Any]) -> bool:
    return item.get("Passed") is not True


_FIT_ORDER: tuple[tuple[str, Callable[[dict[str, Any]], bool]], ...] = (
    ("comparisons", lambda _: True),
    ("failures", lambda _: True),
    ("correctness", _failed_check),
    ("rows", lambda _: True),
    ("correctness", lambda item: not _failed_check(item)),
    ("diagnoses", lambda _: True),
)
"""What a cut answer keeps first: the verdicts, why things failed, failed checks, rows."""

_PART_NAMES = {
    "failures": "failures",
    "comparisons": "comparisons",
    "correctness": "correctness entries",
    "rows": "rows",
    "diagnoses": "diagnoses",
}


def fit_result(result: ProfileResult, budget: int = ANSWER_BYTES) -> ProfileResult:
    """The result cut to `budget` bytes of JSON, saying what it left out; as-is if it fits.

    Each list keeps its order; which entries stay is decided by `_FIT_ORDER`.
    """
    dumped = result.model_dump(mode="json")
    if _size(dumped) <= budget:
        return result
    base = dict(dumped, **{part: [] for part in _PART_NAMES})
    used = _size(base) + _NOTE_BYTES
    kept: dict[str, set[int]] = {part: set() for part in _PART_NAMES}
    full: set[str] = set()
    for part, wanted in _FIT_ORDER:
        if part in full:
            continue
        for i, item in enumerate(dumped[part]):
            if i in kept[part] or not wanted(item):
                continue
            cost = _size(item) + 1
            if used + cost > budget:
                full.add(part)
                break
            used += cost
            kept[part].add(i)
    cut = [
        f"{len(kept[part])} of {len(dumped[part])} {name}"
        for part, name in _PART_NAMES.items()
        if len(kept[part]) < len(dumped[part])
    ]
    note = (
        f"This answer is cut to {budget // 1000} KB: it shows {', '.join(cut)}. Narrow it with "
        f"read_results(result_id='{result.result_id}', annotation=..., config_id=..., metric=...)."
    )
    where = full_data_text(result.result_id, rows=bool(result.rows))
    if where not in result.message:
        note += f" {where}"
    update: dict[str, Any] = {
        part: [getattr(result, part)[i] for i in sorted(kept[part])] for part in _PART_NAMES
    }
    update["message"] = f"{_sentence(result.message)} {note}" if result.message else note
    return result.model_copy(update=update)


def fit_listing(answer: ReadResultsAnswer, budget: int = ANSWER_BYTES) -> ReadResultsAnswer:
    """A listing page cut to `budget` bytes: fewer summaries, the cursor after the last one."""
    dumped = answer.model_dump(mode="json")
    if _size(dumped) <= budget or not answer.results:
        return answer
    used = _size(dict(dumped, results=[])) + _NOTE_BYTES
    shown = 0
    for item in dumped["results"]:
        used += _size(item) + 1
        if used > budget:
            break
        shown += 1
    shown = max(shown, 1)
    kept = answer.results[:shown]
    cursor = kept[-1].result_id
    message = (
        f"{shown} of {answer.total} matching result(s), newest first (the page is cut to "
        f"{budget // 1000} KB); call read_results with the same filters and cursor='{cursor}' "
        "for the next page, or pass a smaller limit. Read one with read_results(result_id=...)."
    )
    return answer.model_copy(update={"results": kept, "next_cursor": cursor, "message": message})


def fit_validation(answer: MetricsValidation, budget: int = ANSWER_BYTES) -> MetricsValidation:
    """Metric checks cut to `budget`: valid names lose their catalog text, then the tail goes."""
    if _size(answer.model_dump(mode="json")) <= budget:
        return answer
    lean = [
        m.model_copy(update={"description": None, "valid_names": m.valid_names[:3]})
        if m.status == "valid"
        else m.model_copy(
            update={"valid_names": m.valid_names[:5], "suggestions": m.suggestions[:5]}
        )
        for m in answer.metrics
    ]
    used = _size(answer.model_copy(update={"metrics": []}).model_dump(mode="json")) + _NOTE_BYTES
    kept = []
    for check in sorted(lean, key=lambda m: m.status == "valid"):  # problems first
        used += _size(check.model_dump(mode="json")) + 1
        if used > budget:
            break
        kept.append(check)
    order = {id(m): i for i, m in enumerate(lean)}
    kept.sort(key=lambda m: order[id(m)])
    note = (
        f"This answer is cut to {budget // 1000} KB: valid names are listed without ncu's "
        f"description; {len(kept)} of {len(lean)} names shown (problems first). Validate "
        "fewer names at a time for the rest."
    )
    return answer.model_copy(update={"metrics": kept, "notes": [*answer.notes, note]})


def tool_answer(model: BaseModel, links: Sequence[ResourceLink] = ()) -> CallToolResult:
    """A tool's answer: the model as structured content, the same JSON as its text (compact,
    so the text is no larger than the structure), and links to the data it leaves out."""
    structured = model.model_dump(mode="json")
    content: list[ContentBlock] = [TextContent(type="text", text=_json(structured))]
    content.extend(links)
    return CallToolResult(content=content, structured_content=structured)


def result_tool_answer(store: ResultStore, result: ProfileResult) -> CallToolResult:
    """profile_candidates' compact answer: fitted, with links to the whole result."""
    return tool_answer(fit_result(result), result_links(store, result))


def result_answer(
    result: ProfileResult,
    *,
    full: bool,
    annotation: str | None,
    config_id: int | None,
    metric: str | None,
) -> ReadResultsAnswer:
    """read_results' answer for one result: shaped, fitted unless full, saying what it shows."""
    shaped = shape_result(
        result, full=full, annotation=annotation, config_id=config_id, metric=metric
    )
    narrowed = [
        f"{k}={v!r}"
        for k, v in (("annotation", annotation), ("config_id", config_id), ("metric", metric))
        if v is not None
    ]
    head = _sentence(f"result {result.result_id} is {result.status}: {result.message}")
    verdict = verdict_text(shaped) if result.rows else ""
    where = full_data_text(result.result_id, rows=bool(result.rows))
    matching = len(shaped.rows)
    if not full:  # what this message adds must fit beside the result
        room = len(" ".join((head, verdict, where)).encode()) + 300
        shaped = fit_result(shaped, ANSWER_BYTES - room)
    parts = [head, verdict]
    if result.rows:
        shown = f"Showing {len(shaped.rows)} of {len(result.rows)} row(s)"
        if narrowed:
            shown += f" ({', '.join(narrowed)})"
        if len(shaped.rows) < matching:
            shown += f"; {matching - len(shaped.rows)} more were cut to fit (see result.message)"
        parts.append(shown + ".")
        if not full:
            parts.append("detail='full' adds raw per-run values.")
    if result.status not in ("queued", "running"):
        parts.append(where)
    return ReadResultsAnswer(result=shaped, message=" ".join(p for p in parts if p))


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
