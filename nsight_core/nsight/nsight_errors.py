"""Failures the `@kernel` API raises where Nsight Python raises, with Nsight Python's classes.

The rule (docs/compat.md): under the Nsight-compatible API a call raises wherever Nsight
Python raises, with the same exception class and a message that says what to change; the
call's `ProfileResults` ride on the exception as ``err.results``, so the rows of the other
annotations are not lost. The MCP route reports the same failures as rows and failures
and never raises for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.exceptions import (
    InvalidMetricsError,
    KernelCountError,
    ProfilerException,
)
from nsight_core.host.catalog import validate_metrics
from nsight_core.plan.config import EngineConfig
from nsight_core.protocol import RunKey
from nsight_core.results import Row
from nsight_core.rows.run_values import RunValues

MAX_CONFIGS_NAMED = 8
"""A count table names this many configs, then says how many more there are."""

KERNEL_COUNT_HINT = (
    "to fold several kernels into one value per run pass combine_kernel_metrics (a reducer "
    "name such as 'sum', or a binary function), drop helper kernels with ignore_kernel_list, "
    "or profile the whole region as one with replay_mode='range'; counts that change between "
    "runs of one config come from autotuning or caches: warm them up (warmup=)"
)


def nsight_error(err: NsightCoreError, metrics: Sequence[str]) -> NsightCoreError:
    """The same failure under Nsight Python's exception names."""
    if isinstance(err, ProfilerException):
        return err
    if err.error_class is ErrorClass.INVALID_METRIC:
        bad = [m for m in metrics if m in err.message] or list(metrics)
        return InvalidMetricsError(bad, err.message)
    if err.error_class is ErrorClass.NO_KERNELS:
        return KernelCountError(err.message, err.hint, ErrorClass.NO_KERNELS)
    return ProfilerException(err.message, err.error_class, err.hint)


def precheck_metrics(metrics: Sequence[str], config: EngineConfig) -> None:
    """Refuse names the shipped catalogs know to be wrong before starting ncu (the chip is
    that of the GPU ``config`` shows the jobs)."""
    try:
        report = validate_metrics(list(metrics), source="shipped", config=config)
    except Exception:  # no catalog for this chip: ncu and the report check decide
        return
    bad = [m for m in report.metrics if m.status in ("unknown", "needs_suffix")]
    if bad:
        detail = "; ".join(
            f"{m.name}: {m.status}"
            + (f" (did you mean {', '.join((m.suggestions or m.valid_names)[:3])}?)"
               if (m.suggestions or m.valid_names) else "")
            for m in bad
        )  # fmt: skip
        raise InvalidMetricsError([m.name for m in bad], detail)


def raise_for_invalid_metrics(rows: Sequence[Row], metrics: Sequence[str], results: Any) -> None:
    """Nsight Python raises ValueError for unknown metrics; the results ride on the error."""
    bad = [
        m
        for m in metrics
        if any(r.Metric == m for r in rows)
        and all(r.ErrorClass is ErrorClass.INVALID_METRIC for r in rows if r.Metric == m)
    ]
    if bad:
        err = InvalidMetricsError(bad, "no profiled kernel carries these metrics")
        err.results = results  # type: ignore[attr-defined]
        raise err


def kernel_count_error(values: RunValues) -> KernelCountError | None:
    """Nsight Python's `RuntimeError` for kernels that do not give one value per run.

    Raised when an annotation's runs launched different numbers of kernels, or more than
    one kernel without a way to fold them (``combine_kernel_metrics``, ``replay_mode=
    'range'``), and when no kernel was profiled at all. Counts that differ between configs
    are fine when they are folded: kernels are attributed by identity here, not by position.
    """
    if not values.metrics or not values.values:
        return None
    metric = values.metrics[0]
    cells = [
        values.values[(k, metric)] for k in values.expected_keys if (k, metric) in values.values
    ]
    if cells and all(c.error_class is ErrorClass.NO_KERNELS for c in cells):
        names = list(dict.fromkeys(c.key.annotation for c in cells))
        return KernelCountError(
            f"No kernels were profiled in any run of {', '.join(map(repr, names))}",
            "launch GPU work inside the annotated regions; check that ignore_kernel_list "
            "does not drop all of it",
            ErrorClass.NO_KERNELS,
        )
    flagged = list(
        dict.fromkeys(
            c.key.annotation for c in cells if c.error_class is ErrorClass.KERNEL_COUNT_MISMATCH
        )
    )
    if not flagged:
        return None
    runs = {
        c.key: c.kernels
        for c in cells
        if c.key.annotation == flagged[0]
        and c.error_class in (None, ErrorClass.KERNEL_COUNT_MISMATCH)
    }
    return KernelCountError(_count_message(flagged[0], runs), KERNEL_COUNT_HINT)


def _count_message(annotation: str, runs: dict[RunKey, tuple[str, ...]]) -> str:
    counts = sorted({len(k) for k in runs.values()})
    names = sorted({n for kernels in runs.values() for n in kernels})
    table = _count_table(runs)
    if len(counts) > 1:
        return (
            f"Expect same number of kernels per run: the {annotation} annotation launched "
            f"{' or '.join(map(str, counts))} kernels per run ({table}); kernels: {names}"
        )
    return (
        f"More than one ({counts[0]} per run) kernel is launched within the {annotation} "
        f"annotation, and nothing folds them into one value per run; kernels: {names}"
    )


def _count_table(runs: dict[RunKey, tuple[str, ...]]) -> str:
    """Kernels per run, config by config ("config 0: 2 per run (10 runs); config 1: run 0: 1,
    run 1: 2"): a library that picks its kernels by shape shows as configs that differ."""
    by_config: dict[int, dict[int | None, int]] = {}
    for key, kernels in runs.items():
        by_config.setdefault(key.config_id, {})[key.run] = len(kernels)
    parts = []
    for cid in sorted(by_config):
        per_run = by_config[cid]
        if len(set(per_run.values())) == 1:
            n, many = next(iter(per_run.values())), len(per_run)
            parts.append(f"config {cid}: {n} per run ({many} run{'s' if many > 1 else ''})")
        else:
            listed = sorted(per_run.items(), key=lambda rc: -1 if rc[0] is None else rc[0])
            parts.append(f"config {cid}: " + ", ".join(f"run {r}: {c}" for r, c in listed))
    more = len(parts) - MAX_CONFIGS_NAMED
    return "; ".join(parts[:MAX_CONFIGS_NAMED]) + (f"; and {more} more configs" if more > 0 else "")


__all__ = [
    "kernel_count_error",
    "nsight_error",
    "precheck_metrics",
    "raise_for_invalid_metrics",
]
