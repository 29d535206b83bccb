"""Who finds a mutated input: the judge, from its slots, for arrays the call sees as views of
them; the contestant, for arrays it had to copy (a strided layout). Real jobs on CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsight_core.pipeline import run_profile_job
from nsight_core.request import ProfileRequest

REFERENCE = """
import torch

def make_inputs(n, strided):
    x = torch.randn(n, n)
    return (x.t() if strided else x,)

def ref(x):
    return x * 2
"""
CANDIDATE = """
def scribble(x):
    out = x * 2
    x.zero_()
    return out
"""


@pytest.mark.parametrize(
    ("strided", "reason"),
    [(False, "mutated input args[0] (seen in the judge's slot)"), (True, "mutated input args[0]")],
)
def test_a_mutated_input_is_found_whether_the_call_saw_a_view_or_a_copy(
    tmp_path: Path, strided: bool, reason: str
) -> None:
    (tmp_path / "ref.py").write_text(REFERENCE)
    (tmp_path / "cand.py").write_text(CANDIDATE)
    req = ProfileRequest.model_validate(
        {
            "reference": "ref.py:ref",
            "candidates": ["cand.py:scribble"],
            "inputs": "ref.py:make_inputs",
            "configs": [{"n": 64, "strided": strided}],
            "workdir": str(tmp_path),
            "backend": "events",
            "runs": 2,
        }
    )
    result = run_profile_job(req, tmp_path / "job", result_id="t")
    check = next(c for c in result.correctness if c.Annotation == "cand.py:scribble")
    assert not check.Passed
    assert reason in check.Reasons, check.Reasons
