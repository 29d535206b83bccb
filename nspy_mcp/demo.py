"""Stub: filled in by its issue."""

from __future__ import annotations


def run_demo(*, store: str | None, backend: str) -> int:
    raise NotImplementedError("run_demo")
