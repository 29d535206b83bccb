"""Stub: filled in by its issue."""

from __future__ import annotations


def run_plot(result_id: str, *, output: str | None, store: str | None) -> int:
    raise NotImplementedError("run_plot")
