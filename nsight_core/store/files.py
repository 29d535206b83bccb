"""What one stored result is on disk: its id, its file names, files written whole, and the
schema check a result read back must pass.

The invariants every reader of the store relies on (ids that are safe path names, no half
written file, nothing returned half-valid) are kept here, apart from the index and the
retention the store object manages; the server's resources and cluster copies use the same
names and checks.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema.validators import validator_for  # type: ignore[import-untyped, unused-ignore]

from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.results import ProfileResult

INDEX_FILE = "index.sqlite3"
MANIFEST_FILE = "manifest.json"
RESULT_FILE = "result.json"
LOCK_FILE = ".owner.lock"

RESULT_ID_PATTERN = r"^r\d{8}T\d{9}-[0-9a-f]{8}$"
"""'r', UTC date, 'T', time to the millisecond, '-', 8 random hex digits: ids sort by time."""
RESULT_ID_LEN = 28
_RESULT_ID_RE = re.compile(RESULT_ID_PATTERN)


class CorruptResultError(Exception):
    """A stored file is unreadable or fails the ProfileResult schema."""

    def __init__(self, result_id: str, path: Path, detail: str) -> None:
        super().__init__(f"stored result {result_id} is corrupt: {path}: {detail}")
        self.result_id = result_id
        self.path = path
        self.detail = detail


def validate_result_id(result_id: str) -> str:
    """Return the id if it is one of ours; otherwise raise invalid_request."""
    if (
        not isinstance(result_id, str)
        or len(result_id) != RESULT_ID_LEN
        or _RESULT_ID_RE.fullmatch(result_id) is None
    ):
        raise NsightCoreError(
            ErrorClass.INVALID_REQUEST,
            f"{result_id!r} is not a result id",
            "pass a result_id exactly as profile_candidates or a listing returned it, "
            "e.g. 'r20261201T120000123-0a1b2c3d'; list results by calling read_results "
            "without result_id",
        )
    return result_id


def new_result_id(now: datetime) -> str:
    stamp = now.strftime("%Y%m%dT%H%M%S") + f"{now.microsecond // 1000:03d}"
    return f"r{stamp}-{secrets.token_hex(4)}"


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` so readers see the old file or the new one, never a mix."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


@cache
def result_validator() -> Any:
    schema = ProfileResult.model_json_schema()
    cls = validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def warm_result_validator() -> None:
    """Build the validator stored results are checked with, once per process: checking the
    schema itself takes about 0.3 s, which a server's first request paid unless its start-up
    thread (``nspy-mcp serve``) did this first."""
    result_validator()
