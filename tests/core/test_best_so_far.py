"""The best so far: real jobs (events on CPU, real judge and contestant) through the real
store, and the verdict arithmetic on its own.

Host-clock times are set by sleeps far apart (20, 50, 90 ms against the reference's 100 ms),
so no verdict below depends on this host's speed; the incumbent of most tests is `same`, 2x
the reference.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from nsight_core.pipeline import run_profile_job
from nsight_core.request import ProfileRequest
from nsight_core.results import BestCandidate, BestVerdict, ProfileResult
from nsight_core.store.best import (
    BEST_DIR,
    DRIFT_MARGIN,
    Entry,
    Score,
    combined,
    verdict_of,
)
from nsight_core.store.result_store import ResultStore

REFERENCE = """
import time

def make(n):
    return (n,)

def ref(n):
    time.sleep(0.100)
    return n * 2
"""

CANDIDATES = """
import time

def same(n):
    time.sleep(0.050)
    return n * 2

def faster(n):
    time.sleep(0.020)
    return n * 2

def slower(n):
    time.sleep(0.090)
    return n * 2

def wrong(n):
    time.sleep(0.001)
    return n * 3
"""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """The reference in a file of its own, the candidates in theirs, and a copy of them."""
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "ref.py").write_text(REFERENCE)
    (folder / "cands.py").write_text(CANDIDATES)
    (folder / "twin.py").write_text(CANDIDATES)
    return folder


def request_of(workdir: Path, candidates: list[str], **overrides: Any) -> ProfileRequest:
    fields: dict[str, Any] = {
        "reference": "ref.py:ref",
        "inputs": "ref.py:make",
        "candidates": candidates,
        "workdir": str(workdir),
        "configs": [{"n": 3}],
        "backend": "events",
        "runs": 5,
        "check": {"seeds": 1, "check_determinism": False},
    }
    fields.update(overrides)
    return ProfileRequest.model_validate(fields)


def profile(store: ResultStore, request: ProfileRequest) -> ProfileResult:
    """One job as the server runs it: queued in the store, run by the engine, finished."""
    result_id = store.create(request).result_id
    result = run_profile_job(request, store.result_dir(result_id), result_id=result_id)
    return store.finish(result)


def verdicts(result: ProfileResult) -> dict[str, BestVerdict]:
    assert result.status == "done", result.message
    assert result.best_so_far is not None
    print([(r.Annotation, r.Trust, r.Reasons) for r in result.rows])  # shown on failure
    return {v.annotation: v for v in result.best_so_far.verdicts}


def record(store: ResultStore, result: ProfileResult) -> dict[str, Any]:
    assert result.best_so_far is not None
    path = store.root / BEST_DIR / f"{result.best_so_far.lineage}.json"
    best: dict[str, Any] = json.loads(path.read_text())["best"]
    return best


def test_a_copy_of_the_best_is_unresolved_and_a_failed_candidate_never_becomes_it(
    tmp_path: Path, workdir: Path
) -> None:
    with ResultStore(tmp_path / "store") as store:
        first = profile(store, request_of(workdir, ["cands.py:same", "cands.py:wrong"]))
        said = verdicts(first)
        assert said["cands.py:same"].beats_best == "first"
        assert said["cands.py:wrong"].beats_best is None
        assert "failed the check" in said["cands.py:wrong"].why
        assert first.best_so_far is not None and first.best_so_far.incumbent is None
        assert first.best_so_far.new_best == "cands.py:same"
        assert "'cands.py:same' is the new best" in first.message

        # A/A across jobs: the same code from another file must not read as better.
        again = profile(store, request_of(workdir, ["twin.py:same", "cands.py:wrong"]))
        said = verdicts(again)
        assert said["twin.py:same"].beats_best == "unresolved"
        assert said["cands.py:wrong"].beats_best is None
        assert again.best_so_far is not None and again.best_so_far.new_best is None
        incumbent = again.best_so_far.incumbent
        assert incumbent is not None and incumbent.result_id == first.result_id
        assert record(store, again)["result_id"] == first.result_id


@pytest.mark.slow  # three jobs
def test_a_clearly_faster_candidate_beats_the_best_and_replaces_it(
    tmp_path: Path, workdir: Path
) -> None:
    with ResultStore(tmp_path / "store") as store:
        first = profile(store, request_of(workdir, ["cands.py:same"]))
        assert verdicts(first)["cands.py:same"].beats_best == "first"

        second = profile(store, request_of(workdir, ["cands.py:slower", "cands.py:faster"]))
        said = verdicts(second)
        assert said["cands.py:slower"].beats_best == "no"
        assert said["cands.py:faster"].beats_best == "yes"
        assert "across jobs" in said["cands.py:faster"].why
        vs = said["cands.py:faster"].vs_best
        assert vs is not None and vs > 1.5
        assert second.best_so_far is not None
        assert second.best_so_far.new_best == "cands.py:faster"
        best = record(store, second)
        assert (best["annotation"], best["result_id"]) == ("cands.py:faster", second.result_id)

        # The best's own code beside another: the runs paired in this job decide.
        third = profile(store, request_of(workdir, ["cands.py:faster", "cands.py:same"]))
        said = verdicts(third)
        assert said["cands.py:faster"].beats_best is None
        assert "itself" in said["cands.py:faster"].why
        assert said["cands.py:same"].beats_best == "no"
        assert "paired in this job" in said["cands.py:same"].why
        assert third.best_so_far is not None and third.best_so_far.new_best is None


def test_a_candidate_whose_rows_are_suspicious_never_sets_the_best(
    tmp_path: Path, workdir: Path
) -> None:
    with ResultStore(tmp_path / "store") as store:
        unchecked = profile(
            store, request_of(workdir, ["cands.py:faster"], check={"enabled": False})
        )
    (row,) = [r for r in unchecked.rows if r.Annotation == "cands.py:faster"]
    assert row.Trust == "suspicious"  # unchecked values may come from wrong code
    said = verdicts(unchecked)["cands.py:faster"]
    assert said.beats_best is None and "not checked" in said.why
    assert unchecked.best_so_far is not None and unchecked.best_so_far.new_best is None
    assert "none yet" in unchecked.message
    assert not list((tmp_path / "store" / BEST_DIR).glob("*.json"))


def test_editing_the_reference_starts_a_new_lineage(tmp_path: Path, workdir: Path) -> None:
    with ResultStore(tmp_path / "store") as store:
        first = profile(store, request_of(workdir, ["cands.py:same"]))
        (workdir / "ref.py").write_text(REFERENCE + "\n# a comment is an edit too\n")
        second = profile(store, request_of(workdir, ["cands.py:same"]))
    assert first.best_so_far is not None and second.best_so_far is not None
    assert first.best_so_far.lineage != second.best_so_far.lineage
    assert second.best_so_far.incumbent is None
    assert verdicts(second)["cands.py:same"].beats_best == "first"


# -- the arithmetic ------------------------------------------------------------------------


def _incumbent(speedup: float, lo: float, hi: float) -> BestCandidate:
    return BestCandidate(
        annotation="best.py:f",
        source_sha256=None,
        speedup=speedup,
        ci95_lower=lo,
        ci95_upper=hi,
        result_id="r20261201T120000123-0a1b2c3d",
        since="2026-12-01T12:00:00.123+00:00",
    )


def test_one_config_keeps_its_interval_and_configs_combine_in_the_log() -> None:
    one = combined([Score(2.0, 1.8, 2.3)])
    assert (one.speedup, one.lo, one.hi) == pytest.approx((2.0, 1.8, 2.3))
    two = combined([Score(2.0, 1.8, 2.2), Score(8.0, 7.2, 8.8)])
    assert two.speedup == pytest.approx(4.0)  # the geometric mean
    # Two independent configs: the log half-width shrinks by sqrt(2).
    assert math.log(two.hi / two.speedup) == pytest.approx(math.log(1.1) / math.sqrt(2))


@pytest.mark.parametrize(
    ("lo", "hi", "expected"),
    [
        (3.2, 3.4, "yes"),  # clears the incumbent's 3.0 by more than the margin
        (3.01, 3.4, "unresolved"),  # above it, but within the drift margin
        (2.7, 3.1, "unresolved"),  # overlaps: never a coin flip
        (2.0, 2.2, "no"),
    ],
)
def test_across_jobs_only_intervals_apart_by_the_margin_decide(
    lo: float, hi: float, expected: str
) -> None:
    entry = Entry("cand.py:g", Score(math.sqrt(lo * hi), lo, hi))
    verdict = verdict_of(entry, _incumbent(2.8, 2.6, 3.0), None)
    assert verdict.beats_best == expected
    assert 1 + DRIFT_MARGIN > 3.01 / 3.0  # the second case sits inside the margin


def test_a_tie_is_unresolved_and_with_no_best_only_a_resolvable_speedup_is_first() -> None:
    tie = Entry("cand.py:g", Score(2.8, 2.6, 3.0), faster=True)  # Resolvable on every config
    assert verdict_of(tie, _incumbent(2.8, 2.6, 3.0), None).beats_best == "unresolved"
    assert verdict_of(tie, None, None).beats_best == "first"
    within_noise = Entry("cand.py:g", Score(1.1, 0.9, 1.3))
    assert verdict_of(within_noise, None, None).beats_best is None
    paired = Score(1.5, 1.01, 2.0)  # beside the best in one job: no drift margin
    assert verdict_of(tie, _incumbent(2.8, 2.6, 3.0), paired).beats_best == "yes"
