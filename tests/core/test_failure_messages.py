"""What a job's message says when callables fail: the phase, the class and the place of each
failure, the reference's own failure first (issue 24, items 5 and 6).

Real jobs: the events backend on CPU, the judge and contestant as real processes, files in
tmp_path. Each job is small (one or two configs, two runs, one seed).
"""

from __future__ import annotations

import importlib.util
import json
import traceback
from pathlib import Path

from nsight_core.errors import ErrorClass
from nsight_core.pipeline import run_profile_job
from nsight_core.request import ProfileRequest
from nsight_core.results import ProfileResult
from nsight_core.rows.assemble import user_frame

REFERENCE = """\
def make_inputs(n):
    return (list(range(n)),)

def ref(xs):
    return sum(xs)
"""

RAISES_AT_IMPORT = """\
LIMIT = 3
raise RuntimeError("boom while importing")

def cand(xs):
    return sum(xs)
"""

SYNTAX_ERROR = """\
def cand(xs)
    return sum(xs)
"""

WRONG = """\
def cand(xs):
    return sum(xs) + 1
"""

RAISES_WHEN_CALLED = """\
def helper(xs):
    raise ValueError("cannot sum these")

def cand(xs):
    return helper(xs)
"""

OPENS_A_MISSING_FILE = """\
def cand(xs):
    with open({path!r}, "rb") as fh:
        return fh.read()
"""


def job(
    tmp_path: Path,
    files: dict[str, str],
    candidates: list[str],
    *,
    configs: int = 1,
    reference: str = REFERENCE,
) -> ProfileResult:
    """An events job of ``ref.py:ref`` against ``candidates``, with ``files`` in tmp_path."""
    (tmp_path / "ref.py").write_text(reference)
    for name, code in files.items():
        (tmp_path / name).write_text(code)
    request = ProfileRequest(
        reference="ref.py:ref",
        candidates=candidates,
        inputs="ref.py:make_inputs",
        configs=[{"n": 16 * (i + 1)} for i in range(configs)],
        workdir=str(tmp_path),
        backend="events",
        runs=2,
        check={"seeds": 1},
    )
    return run_profile_job(request, tmp_path / "job", result_id="t")


def test_each_candidate_is_named_with_the_phase_it_failed_in(tmp_path: Path) -> None:
    files = {
        "imp.py": RAISES_AT_IMPORT,
        "syn.py": SYNTAX_ERROR,
        "wrong.py": WRONG,
        "calls.py": RAISES_WHEN_CALLED,
        "opens.py": OPENS_A_MISSING_FILE.format(path=str(tmp_path / "absent.bin")),
    }
    cands = ["imp.py:cand", "syn.py:cand", "wrong.py:cand", "calls.py:cand", "opens.py:cand"]
    result = job(tmp_path, files, cands, configs=2)
    message = result.message
    assert result.status == "failed"
    assert message.startswith("no candidate passed: none of the 5 candidates was timed: ")
    assert "got through import" not in message
    assert "'imp.py:cand' raised at import (runtime_error: " in message
    assert "'syn.py:cand' did not compile at import (compile_error: " in message
    assert "'wrong.py:cand' failed the correctness check on configs 0, 1 (incorrect: " in message
    assert "'calls.py:cand' raised in the correctness check on configs 0, 1 (runtime_error: " in (
        message
    )
    assert f"at {tmp_path / 'calls.py'}:2" in message
    assert message.index("'imp.py:cand'") < message.index("'calls.py:cand'")  # request order
    assert "Only the reference was timed." in message
    assert {r.Annotation for r in result.rows if r.AvgValue is not None} == {"ref.py:ref"}
    # `error` is the first candidate's failure, with its file and line.
    assert result.error is not None and result.error.Annotation == "imp.py:cand"
    assert result.error.File == str(tmp_path / "imp.py") and result.error.Line == 2
    # A runtime error in a call carries the innermost frame of the user's code (helper,
    # line 2), not the contestant's harness frame that called it.
    calls = [f for f in result.failures if f.Annotation == "calls.py:cand"]
    assert calls and {f.ErrorClass for f in calls} == {ErrorClass.RUNTIME_ERROR}
    assert {(f.File, f.Line) for f in calls} == {(str(tmp_path / "calls.py"), 2)}
    # An OSError's `filename` is the file it could not open: the place is still the code's.
    opens = [f for f in result.failures if f.Annotation == "opens.py:cand"]
    assert opens and {(f.File, f.Line) for f in opens} == {(str(tmp_path / "opens.py"), 2)}


def test_the_only_candidate_failing_at_import_is_not_said_to_have_got_through(
    tmp_path: Path,
) -> None:
    result = job(tmp_path, {"imp.py": RAISES_AT_IMPORT}, ["imp.py:cand"])
    assert result.status == "failed"
    assert result.message.startswith(
        "no candidate passed: the only candidate, 'imp.py:cand', raised at import (runtime_error: "
    ), result.message
    assert "RuntimeError: boom while importing" in result.message
    assert f"at {tmp_path / 'imp.py'}:2" in result.message


def test_a_reference_that_fails_to_import_is_named_first_and_nothing_is_said_timed(
    tmp_path: Path,
) -> None:
    broken = 'raise ImportError("the reference needs a library that is absent")\n' + REFERENCE
    result = job(tmp_path, {"wrong.py": WRONG}, ["wrong.py:cand"], reference=broken)
    assert result.status == "failed"
    assert result.message.startswith(
        "reference failed: the reference 'ref.py:ref' failed to import (import_error: "
    ), result.message
    assert "nothing was checked or timed" in result.message
    assert "Only the reference was timed" not in result.message
    assert "exited with code" not in result.message  # the judge's exit code is not the story
    assert result.error is not None and result.error.Annotation == "ref.py:ref"
    assert result.error.Phase == "import"
    assert result.error.File == str(tmp_path / "ref.py") and result.error.Line == 1
    assert not result.rows


def test_a_reference_that_raises_on_one_config_is_named_before_the_rows(tmp_path: Path) -> None:
    picky = REFERENCE.replace(
        "    return sum(xs)",
        "    if len(xs) > 16:\n        raise ValueError('too long')\n    return sum(xs)",
    )
    same = {"same.py": REFERENCE.replace("def ref", "def cand")}
    result = job(tmp_path, same, ["same.py:cand"], configs=2, reference=picky)
    assert result.message.startswith(
        "reference failed: the reference 'ref.py:ref' raised in the correctness check on "
        "config 1 (runtime_error: ValueError: too long; at "
    ), result.message
    assert "config 1 could not be checked or timed" in result.message
    ref_fail = next(f for f in result.failures if f.Annotation == "ref.py:ref")
    assert (ref_fail.File, ref_fail.Line) == (str(tmp_path / "ref.py"), 6)
    timed = {(r.Annotation, r.ConfigId) for r in result.rows if r.AvgValue is not None}
    assert timed == {("ref.py:ref", 0), ("same.py:cand", 0)}


def test_user_frame_skips_library_frames_for_the_line_that_called_them(tmp_path: Path) -> None:
    user = tmp_path / "user_code.py"
    user.write_text("import json\n\ndef parse(text):\n    return json.loads(text)\n")
    spec = importlib.util.spec_from_file_location("user_code_for_frames", user)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        module.parse("{not json")
    except json.JSONDecodeError as exc:
        text = "".join(traceback.format_exception(exc))
    assert "json/decoder.py" in text  # the innermost frame is the stdlib's
    assert user_frame(text) == (str(user), 4)
    assert user_frame("no frames here") is None
