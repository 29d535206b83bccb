"""Stub: `nspy-mcp env` and `nspy-mcp metrics` (filled in by the environment issue)."""

from __future__ import annotations

from collections.abc import Sequence


def run_env(*, deep: bool, refresh: bool, as_json: bool) -> int:
    raise NotImplementedError("run_env")


def run_metrics(names: Sequence[str], *, chip: str | None, as_json: bool) -> int:
    raise NotImplementedError("run_metrics")
