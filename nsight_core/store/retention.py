"""Retention: how many finished results a store keeps, and which ones it deletes first.

After each finished job, and when a store opens, the store (store.result_store) deletes the
results `beyond_limits` names: past ``max_results`` the oldest finished ones, and every
finished one older than ``max_age_days``. Queued and running results are never among them.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from nsight_core.plan.config import MAX_AGE_DAYS_ENV, MAX_RESULTS_ENV, EngineConfig

DEFAULT_MAX_RESULTS = 1000
"""Keep this many finished results by default: enough for long agent sessions, and small
enough (a result is typically well under 1 MB plus its report) to never fill a disk."""


@dataclass(frozen=True)
class Retention:
    """How many finished results the store keeps; None means no limit of that kind."""

    max_results: int | None = DEFAULT_MAX_RESULTS
    max_age_days: float | None = None

    def __post_init__(self) -> None:
        if self.max_results is not None and self.max_results < 1:
            raise ValueError("max_results must be >= 1 (or None for no limit)")
        if self.max_age_days is not None and self.max_age_days <= 0:
            raise ValueError("max_age_days must be > 0 (or None for no limit)")

    @classmethod
    def of_config(cls, config: EngineConfig) -> Retention:
        """The defaults, overridden by the configured limits (NSPY_MCP_STORE_MAX_RESULTS,
        NSPY_MCP_STORE_MAX_AGE_DAYS; '0' or 'none' turns a limit off)."""

        def read(name: str, raw: str | None, kind: type[int] | type[float], default: Any) -> Any:
            if raw is None or raw.strip() == "":
                return default
            if raw.strip().lower() in {"0", "none", "off"}:
                return None
            try:
                return kind(raw)
            except ValueError as exc:
                raise ValueError(f"{name}={raw!r} is not a number") from exc

        return cls(
            max_results=read(MAX_RESULTS_ENV, config.store_max_results, int, DEFAULT_MAX_RESULTS),
            max_age_days=read(MAX_AGE_DAYS_ENV, config.store_max_age_days, float, None),
        )


def beyond_limits(db: sqlite3.Connection, retention: Retention) -> list[str]:
    """The finished results beyond the retention limits, by id: past ``max_results`` the
    oldest (ids sort by creation), then those older than ``max_age_days``."""
    doomed: list[str] = []
    finished = [
        r[0]
        for r in db.execute(
            "SELECT result_id FROM results WHERE status IN ('done', 'failed', 'cancelled') "
            "ORDER BY result_id DESC"
        )
    ]
    if retention.max_results is not None:
        doomed.extend(finished[retention.max_results :])
    if retention.max_age_days is not None:
        cutoff = time.time() - retention.max_age_days * 86400.0
        old = db.execute(
            "SELECT result_id FROM results WHERE created_ts < ? "
            "AND status IN ('done', 'failed', 'cancelled')",
            (cutoff,),
        )
        doomed.extend(r[0] for r in old if r[0] not in doomed)
    return doomed
