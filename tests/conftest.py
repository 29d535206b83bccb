"""Shared fixtures: the recorded ncu reports of tests/data/ncu (see tests/data/README.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

NCU_DATA = Path(__file__).resolve().parent / "data" / "ncu"


@pytest.fixture(scope="session")
def manifest() -> dict[str, Any]:
    """The recorder's manifest: per case, what the child launched and what ncu saw."""
    path = NCU_DATA / "manifest.json"
    if not path.is_file():
        pytest.skip(f"recorded fixtures not present: {NCU_DATA} (see tests/data/README.md)")
    cases: dict[str, Any] = json.loads(path.read_text())["cases"]
    return cases
