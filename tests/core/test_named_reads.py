"""What a confined contestant may read of a named file's folder (docs/sandbox.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nsight_core.errors import ErrorClass
from nsight_core.pipeline import run_profile_job
from nsight_core.processes.sandbox import landlock_abi
from nsight_core.request import ProfileRequest

pytestmark = pytest.mark.skipif(
    landlock_abi() == 0 or os.environ.get("NSPY_MCP_CONFINE") == "0",
    reason="needs Landlock confinement",
)


def test_a_folder_that_holds_the_store_is_never_opened_whole(tmp_path: Path) -> None:
    """A candidate named in the folder above the result store loads, but reading a file
    beside it (the store's side of the tree) is refused: only the named file is granted."""
    (tmp_path / "beside.txt").write_text("store-side data")
    (tmp_path / "ref.py").write_text(
        "def make(n=4):\n    return (list(range(n)),)\ndef ref(xs):\n    return sum(xs)\n"
    )
    (tmp_path / "v1.py").write_text(
        "from pathlib import Path\n"
        "def cand(xs):\n    return sum(xs)\n"
        "def peek(xs):\n"
        f"    Path({str(tmp_path / 'beside.txt')!r}).read_text()\n"
        "    return sum(xs)\n"
    )
    request = ProfileRequest.model_validate(
        {
            "reference": f"{tmp_path}/ref.py:ref",
            "candidates": [f"{tmp_path}/v1.py:cand", f"{tmp_path}/v1.py:peek"],
            "inputs": f"{tmp_path}/ref.py:make",
            "configs": [{}],
            "backend": "events",
            "runs": 2,
            "check": {"seeds": 1},
        }
    )
    result = run_profile_job(request, tmp_path / "store" / "r1", result_id="r1")
    assert result.status == "done", result.message
    verdicts = {c.Annotation: c for c in result.correctness}
    assert verdicts[f"{tmp_path}/v1.py:cand"].Passed
    peek = [f for f in result.failures if f.Annotation == f"{tmp_path}/v1.py:peek"]
    peek_checks = [c for c in result.correctness if c.Annotation == f"{tmp_path}/v1.py:peek"]
    classes = {f.ErrorClass for f in peek} | {c.ErrorClass for c in peek_checks if c.ErrorClass}
    assert classes == {ErrorClass.PERMISSION_DENIED}, (peek, peek_checks)
