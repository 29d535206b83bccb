"""Stub: filled in by its issue."""

from __future__ import annotations


def run_report(path: str, *, fmt: str) -> int:
    raise NotImplementedError("run_report")
