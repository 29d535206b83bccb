"""Candidate code never runs in the judge (issue 26, class 1): shared modules are refused,
a reference that imports a candidate's module fails to import, and trusted code that
rebinds the judge's own tools fails the job instead of deciding its verdicts."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsight_core.errors import NsightCoreError
from nsight_core.pipeline import preflight, run_profile_job
from nsight_core.plan.config import EngineConfig
from nsight_core.request import ProfileRequest
from nsight_core.results import ProfileResult

REFERENCE = """
def make_inputs(n):
    return (list(range(n)),)

def ref(xs):
    return sum(xs)
"""
CANDIDATE = "def cand(xs):\n    return sum(reversed(xs))\n"


def request(tmp_path: Path, **kw: object) -> ProfileRequest:
    base: dict[str, object] = {
        "reference": "ref.py:ref",
        "candidates": ["cand.py:cand"],
        "inputs": "ref.py:make_inputs",
        "configs": [{"n": 16}],
        "workdir": str(tmp_path),
        "backend": "events",
        "runs": 2,
        "check": {"seeds": 1},
    }
    return ProfileRequest.model_validate({**base, **kw})


def run(tmp_path: Path, req: ProfileRequest) -> ProfileResult:
    return run_profile_job(req, tmp_path / "job", result_id="t")


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"candidates": ["ref.py:cand"]}, "are in file"),
        ({"candidates": ["./ref.py:cand"]}, "are in file"),  # the same file, spelled apart
        ({"reference": "ref", "inputs": "make_inputs", "candidates": ["cand"]}, "`source`"),
        ({"candidates": ["cand.py:cand"], "inputs": "cand.py:make_inputs"}, "input maker"),
        (
            {"reference": "mymod:ref", "inputs": "mymod:make_inputs", "candidates": ["mymod:c"]},
            "module 'mymod'",
        ),
    ],
)
def test_a_reference_or_input_maker_sharing_a_candidates_module_is_refused_before_queueing(
    tmp_path: Path, fields: dict[str, object], where: str
) -> None:
    (tmp_path / "ref.py").write_text(REFERENCE + CANDIDATE)
    (tmp_path / "cand.py").write_text(REFERENCE + CANDIDATE)
    source = {"source": REFERENCE + CANDIDATE} if fields.get("reference") == "ref" else {}
    with pytest.raises(NsightCoreError) as err:
        preflight(request(tmp_path, **fields, **source), EngineConfig.from_env())
    assert err.value.error_class.value == "invalid_request"
    assert "must not share a module with a candidate" in err.value.message
    assert where in err.value.message
    assert "reference_source" in (err.value.hint or "")


def test_inline_reference_source_keeps_the_trusted_side_apart_and_the_job_runs(
    tmp_path: Path,
) -> None:
    req = request(
        tmp_path,
        reference="ref",
        inputs="make_inputs",
        candidates=["cand"],
        reference_source=REFERENCE,
        source=CANDIDATE,
    )
    result = run(tmp_path, req)
    assert result.status == "done", result.message
    assert [(c.Annotation, c.Passed) for c in result.correctness] == [("cand", True)]
    assert {r.Annotation for r in result.rows} == {"ref", "cand"}


def test_a_reference_that_imports_a_candidates_module_fails_to_import_and_runs_none_of_it(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran.txt"
    (tmp_path / "cand.py").write_text(
        f"open({str(marker)!r}, 'a').write('ran\\n')\n" + CANDIDATE + "\ndef helper(xs):\n"
        "    return sum(xs)\n"
    )
    (tmp_path / "ref.py").write_text("import cand\n" + REFERENCE)
    result = run(tmp_path, request(tmp_path))
    assert result.status == "failed"
    assert "holds a candidate" in result.message, result.message
    # The contestant imports the candidate (once, at its turn); the judge never does.
    assert not marker.exists() or marker.read_text().count("ran") <= 1


def test_trusted_code_that_rebinds_the_judges_comparison_fails_the_job_naming_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "cand.py").write_text("def cand(xs):\n    return -1\n")
    (tmp_path / "ref.py").write_text(
        "import nsight_core.runtime.compare as c\n"
        "c.same_result = lambda *a, **k: None\n" + REFERENCE
    )
    result = run(tmp_path, request(tmp_path))
    assert result.status == "failed"
    assert "rebound the judge's own nsight_core.runtime.compare.same_result" in result.message
    assert not any(c.Passed for c in result.correctness)
