"""A request answered by another backend than it named: every number says which, and why.

Resolution (plan/request_defaults.py) answers a request that names a backend reading GPU
performance counters (ncu) with one that reads none where this host denies them, and keeps
what it named in `ProfileRequest.fallback`. The finished result says so, from that record
alone (nothing is derived again here):

- every row and comparison the answering backend measured gets a Reason: what was named,
  why it could not run, and that this is the answering backend's own metric, not comparable
  with the named backend's time (a note, not a verdict: Trust stands, as for the other
  notes a backend's rows call for);
- every metric named that the answering backend cannot measure gets a row for each
  (annotation, config) the job timed, made by the same aggregation as any failed row (every
  run failed: no value, NumRuns 0, Trust failed) with ErrorClass permission_denied and an
  Error naming the cause and the fix in `check_environment`'s words;
- the message starts with it, and `provenance.notes` keeps it.

(With `diagnose`, each diagnosis already says that the answering backend reads no counters.)
"""

from __future__ import annotations

from collections.abc import Sequence

from nsight_core.collectors import get_backend
from nsight_core.errors import ErrorClass
from nsight_core.request import DEFAULT_METRIC, BackendFallback, ProfileRequest
from nsight_core.results import Comparison, ProfileResult, Row, comparison_noted, marked
from nsight_core.rows.aggregate import RowContext, RunValue, RunValues, aggregate_rows


def unmeasured(fallback: BackendFallback) -> list[str]:
    """The metrics named that no backend reading no counters measures: all but the time,
    which the answering backend takes under its own name."""
    return [m for m in fallback.metrics if m != DEFAULT_METRIC]


def _instead(fallback: BackendFallback, answered: str) -> str:
    return f"{fallback.backend} was asked for, but {fallback.reason}: {answered} answered instead"


def _named_time(fallback: BackendFallback) -> str:
    return f"{get_backend(fallback.backend).default_metric} as {fallback.backend} measures it"


def _note(fallback: BackendFallback, answered: str, metric: str) -> str:
    return (
        f"{_instead(fallback, answered)}; this is {metric} as {answered} measures it, not "
        f"comparable with {_named_time(fallback)}"
    )


def unmeasured_rows(
    fallback: BackendFallback, answered: str, values: RunValues, ctx: RowContext
) -> list[Row]:
    """A row per metric the answering backend cannot measure and per (annotation, config)
    the job expected runs of, every run failed with the cause and the fix."""
    metrics = unmeasured(fallback)
    error = (
        f"not measured: {fallback.backend} reads it from GPU performance counters, and "
        f"{fallback.reason}; {answered}, which answered instead, reads none. To fix: "
        f"{fallback.fix}"
    )
    cells = {
        (key, m): RunValue(key, m, None, "", error_class=ErrorClass.PERMISSION_DENIED, error=error)
        for key in values.expected_keys
        for m in metrics
    }
    return aggregate_rows(RunValues(cells, values.expected_keys, tuple(metrics)), ctx)


def labelled(
    request: ProfileRequest,
    rows: Sequence[Row],
    comparisons: Sequence[Comparison],
    values: RunValues,
    ctx: RowContext,
) -> tuple[list[Row], list[Comparison]]:
    """The job's rows and comparisons, each noted, with the unmeasured metrics' rows after
    the rows of their (annotation, config); unchanged where the request was answered by the
    backend it named."""
    fallback = request.fallback
    if fallback is None:
        return list(rows), list(comparisons)
    answered = request.backend
    noted = [marked(r, _note(fallback, answered, r.Metric)) for r in rows]  # Trust stands
    extra = unmeasured_rows(fallback, answered, values, ctx)
    order = {
        group: i
        for i, group in enumerate(dict.fromkeys((r.Annotation, r.ConfigId) for r in noted + extra))
    }
    out = sorted(noted + extra, key=lambda r: order[(r.Annotation, r.ConfigId)])  # stable
    return out, [comparison_noted(c, _note(fallback, answered, c.Metric)) for c in comparisons]


def answered_instead(request: ProfileRequest, result: ProfileResult) -> ProfileResult:
    """``result`` with its message led, and its provenance noted, by which backend answered
    and why; unchanged where the request was answered by the backend it named."""
    fallback = request.fallback
    if fallback is None:
        return result
    said = (
        f"{_instead(fallback, request.backend)} (its own time, not comparable with "
        f"{_named_time(fallback)})"
    )
    missing = unmeasured(fallback)
    if missing:
        said += (
            f"; not measured: {', '.join(missing)} (rows with null values, ErrorClass "
            f"{ErrorClass.PERMISSION_DENIED})"
        )
    said += f". To fix: {fallback.fix}"
    provenance = result.provenance
    if provenance is not None:
        provenance = provenance.model_copy(update={"notes": [said, *provenance.notes]})
    message = f"{said}. {result.message}" if result.message else said
    return result.model_copy(update={"message": message, "provenance": provenance})


__all__ = ["answered_instead", "labelled", "unmeasured", "unmeasured_rows"]
