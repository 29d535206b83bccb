"""Staged evaluation on CPU: real judge and contestant processes under the events backend.

The profile stage normally runs under ncu, which this host lacks; `final_backend="events"`
runs it under events instead, so the stage logic (ranking, top k, budget, partial results)
is exercised end to end. tests/gpu/test_stages_gpu.py runs the real cupti screen + ncu.
"""

from __future__ import annotations

import importlib.util
import math
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.protocol import EVENTS_METRIC
from nsight_core.request import ProfileRequest
from nsight_core.results import Comparison, Correctness, ProfileResult, Row, TrustLevel
from nsight_core.stages import (
    StageEta,
    StageUpdate,
    preflight_request,
    rank_candidates,
    run_staged,
)

# Host-clock times are set by sleeps far apart (2, 8, 30 ms against the reference's 20 ms),
# so the ranking does not depend on this host's load. `wrong` is the fastest and incorrect.
SOURCE = """
import time

def make(n):
    return (n,)

def ref(n):
    time.sleep(0.020)
    return n * 2

def fast(n):
    time.sleep(0.002)
    return n * 2

def mid(n):
    time.sleep(0.008)
    return n * 2

def slow(n):
    time.sleep(0.030)
    return n * 2

def wrong(n):
    return n * 3
"""


def staged_request(**overrides: Any) -> ProfileRequest:
    fields: dict[str, Any] = {
        "reference": "ref",
        "candidates": ["slow", "wrong", "mid", "fast"],
        "inputs": "make",
        "source": SOURCE,
        "reference_source": SOURCE,
        "configs": [{"n": 3}],
        "runs": 3,
        "check": {"seeds": 1, "check_determinism": False},
        "stages": {"screen": "events", "top_k": 2},
    }
    fields.update(overrides)
    return ProfileRequest.model_validate(fields)


def test_screen_ranks_by_time_keeps_the_top_k_and_leaves_out_the_incorrect(
    tmp_path: Path,
) -> None:
    updates: list[StageUpdate] = []
    result = run_staged(
        staged_request(),
        tmp_path / "job",
        result_id="staged",
        on_stage=updates.append,
        final_backend="events",
    )
    assert result.status == "done", result.message
    screen, profile = result.stages
    assert (screen.Stage, screen.Status, profile.Stage, profile.Status) == (
        "screen",
        "done",
        "profile",
        "done",
    )
    ranked = [r.Annotation for r in screen.Ranking if r.Rank is not None]
    assert ranked == ["fast", "mid", "slow"]
    assert [r.Annotation for r in screen.Ranking if r.Kept] == ["fast", "mid"]
    wrong = next(r for r in screen.Ranking if r.Annotation == "wrong")
    assert not wrong.Kept and wrong.Rank is None
    assert "failed the check" in wrong.Why and "incorrect" in wrong.Why
    slow = next(r for r in screen.Ranking if r.Annotation == "slow")
    assert "outside top_k=2" in slow.Why
    assert slow.Speedup is not None and slow.Speedup < 1.0
    # The profile stage measured the reference and the kept two only; the screen's rows
    # stay, each marked with its stage.
    assert profile.Annotations == ["ref", "fast", "mid"]
    assert {r.Annotation for r in result.rows if r.Stage == "profile"} == {"ref", "fast", "mid"}
    assert {r.Annotation for r in result.rows if r.Stage == "screen"} == {
        "ref",
        "fast",
        "mid",
        "slow",
    }
    assert all(r.Stage is not None for r in result.rows)
    assert {c.Stage for c in result.comparisons} == {"screen", "profile"}
    assert any(c.Stage == "screen" and not c.Passed for c in result.correctness)
    assert "kept the top 2 ['fast', 'mid']" in result.message
    assert "wrong: failed the check" in result.message
    assert result.artifacts["screen_job_dir"].endswith("screen")
    assert result.provenance is not None
    assert {"stage_screen", "stage_profile"} <= set(result.provenance.phase_seconds)
    # The cross-check ran over both stages: every profile time row and comparison carries
    # the screen's number of the same callable and config; the honest candidates (sleeps
    # 10x and 2.5x shorter than the reference's) agree in direction, so nothing is flagged.
    for r in (r for r in result.rows if r.Stage == "profile"):
        assert r.CrossCheck is not None, r
        assert (r.CrossCheck.Backend, r.CrossCheck.Metric) == ("events", EVENTS_METRIC)
        screen_row = next(
            s for s in result.rows if s.Stage == "screen" and s.Annotation == r.Annotation
        )
        assert r.CrossCheck.Value == screen_row.MedianValue
        assert not any("disagreement" in x or "cupti below" in x for x in r.Reasons)
    for c in (c for c in result.comparisons if c.Stage == "profile"):
        assert c.CrossCheck is not None and c.CrossCheck.Value is not None
        assert c.Speedup is not None and (c.Speedup > 1) == (c.CrossCheck.Value > 1)
        assert not any("disagreement" in x for x in c.Reasons)
    assert all(r.CrossCheck is None for r in result.rows if r.Stage == "screen")
    assert "cross-check" not in result.message
    # The caller heard of each stage as it started; the second came with the screen's
    # rows and an ETA from the screen's measured pace.
    assert [(u.stage, u.index, u.count) for u in updates] == [
        ("screen", 0, 2),
        ("profile", 1, 2),
    ]
    assert updates[0].calls == 5 * 1 * 3 and updates[1].calls == 3 * 1 * 3
    assert updates[1].eta is not None and updates[1].eta.per_call_s > 0
    assert {r.Annotation for r in updates[1].partial.rows} == {"ref", "fast", "mid", "slow"}
    assert [s.Status for s in updates[1].partial.stages] == ["done", "running"]


def test_a_tiny_budget_cuts_the_screen_and_skips_the_profile_stage_saying_why(
    tmp_path: Path,
) -> None:
    # One second is not enough for python and the imports of the screen's processes.
    t0 = time.monotonic()
    result = run_staged(
        staged_request(budget_s=1.0),
        tmp_path / "job",
        result_id="budget",
        final_backend="events",
    )
    wall = time.monotonic() - t0
    screen, profile = result.stages
    assert screen.Status == "cut", screen
    assert screen.TimeLimitS is not None and screen.TimeLimitS <= 1.0
    assert screen.Reason is not None and "budget_s=1 was spent" in screen.Reason
    assert profile.Status == "skipped"
    assert profile.Reason is not None and "budget_s=1 was spent during the screen" in profile.Reason
    assert "profile stage skipped" in result.message
    assert not [r for r in result.rows if r.Stage == "profile"]
    assert wall < 30, "the screen must be stopped at the budget, not at time_limit_s"


@pytest.mark.slow  # two more jobs; the staged path itself runs by default (above)
def test_cupti_screen_falls_back_to_events_where_cupti_cannot_run(tmp_path: Path) -> None:
    if importlib.util.find_spec("cupti") is not None:
        pytest.skip("cupti-python is installed here: no fallback to see")
    request = staged_request(
        candidates=["slow", "fast"], stages={"screen": "cupti", "top_k": 1}, runs=2
    )
    result = run_staged(request, tmp_path / "job", result_id="fb", final_backend="events")
    screen, profile = result.stages
    assert screen.Backend == "events"
    assert screen.Reason is not None and "'cupti' cannot run here" in screen.Reason
    assert "screened with events" in result.message
    assert profile.Annotations == ["ref", "fast"]


# -- ranking rules, on results as the screen writes them -------------------------------------


def _row(ann: str, trust: TrustLevel = "ok", reasons: list[str] | None = None) -> Row:
    return Row(
        Annotation=ann,
        ConfigId=0,
        Params={},
        Metric="t",
        Unit="ns",
        AvgValue=1.0,
        MedianValue=1.0,
        StdDev=0.0,
        MinValue=1.0,
        MaxValue=1.0,
        NumRuns=3,
        RequestedRuns=3,
        RelativeStdDevPct=0.0,
        CI95_Lower=1.0,
        CI95_Upper=1.0,
        StableMeasurement=True,
        Kernel="call",
        Backend="events",
        Evidence="in_process",
        Trust=trust,
        Reasons=reasons or [],
    )


def _comparison(ann: str, speedup: float | None, config: int = 0) -> Comparison:
    return Comparison(
        Annotation=ann,
        Baseline="ref",
        ConfigId=config,
        Params={},
        Metric="t",
        Ratio=None if speedup is None else 1 / speedup,
        Speedup=speedup,
        Speedup_CI95_Lower=None,
        Speedup_CI95_Upper=None,
        Resolvable=None,
        NumPairs=3,
    )


def _passed(ann: str, config: int = 0) -> Correctness:
    return Correctness(Annotation=ann, ConfigId=config, Params={}, Passed=True, Seeds=1)


def test_ranking_ties_keep_request_order_suspicious_rank_last_and_nan_is_not_ranked() -> None:
    cands = ["a", "b", "c", "d", "e"]
    request = staged_request(candidates=cands, stages={"screen": "events", "top_k": 2})
    screen = ProfileResult(
        result_id="r",
        status="done",
        created_at="now",
        rows=[
            _row("a"),
            _row("b"),
            _row("c", "suspicious", ["timer moved"]),
            _row("d"),
            _row("e"),
        ],
        comparisons=[
            _comparison("a", 1.5),
            _comparison("b", 2.0),
            _comparison("c", 9.0),  # fastest, but its in-process timer is in doubt
            _comparison("d", 2.0),  # ties with b: b comes first in the request
            _comparison("e", None),  # no value (NaN) on its only config
        ],
        correctness=[_passed(c) for c in cands],
    )
    ranking = rank_candidates(screen, request, "t", top_k=2)
    by_name = {r.Annotation: r for r in ranking}
    assert [r.Annotation for r in ranking] == ["b", "d", "a", "c", "e"]
    assert [r.Annotation for r in ranking if r.Kept] == ["b", "d"]
    assert by_name["c"].Suspicious and by_name["c"].Rank == 4
    assert "timer moved" in by_name["c"].Why
    assert by_name["e"].Rank is None and "no screen speedup" in by_name["e"].Why


def test_ranking_uses_the_geometric_mean_over_configs_and_needs_every_config() -> None:
    request = staged_request(
        candidates=["a", "b", "c"],
        configs=[{"n": 1}, {"n": 2}],
        stages={"screen": "events", "top_k": 1},
    )
    screen = ProfileResult(
        result_id="r",
        status="done",
        created_at="now",
        rows=[_row("a"), _row("b"), _row("c")],
        comparisons=[
            _comparison("a", 4.0, 0),
            _comparison("a", 1.0, 1),  # geometric mean 2.0
            _comparison("b", 1.9, 0),
            _comparison("b", 1.9, 1),
            _comparison("c", 5.0, 0),  # config 1 not timed
        ],
        correctness=[_passed(c, i) for c in ("a", "b", "c") for i in (0, 1)],
    )
    ranking = rank_candidates(screen, request, "t", top_k=1)
    assert [(r.Annotation, r.Kept) for r in ranking] == [("a", True), ("b", False), ("c", False)]
    assert ranking[0].Speedup is not None and math.isclose(ranking[0].Speedup, 2.0)
    assert "config(s) [1]" in ranking[2].Why


def test_stage_eta_is_the_screen_fixed_cost_left_plus_its_pace_times_calls_left() -> None:
    eta = StageEta(fixed_s=4.0, per_call_s=0.5)
    assert eta.eta_s(0.0, 10) == 9.0
    assert eta.eta_s(3.0, 10) == 6.0
    assert eta.eta_s(10.0, 2) == 1.0


# -- request validation --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"stages": None, "budget_s": 30.0}, "budget_s applies to staged evaluation only"),
        ({"stages": {"top_k": 4}}, "stages.top_k=4 keeps every one of the 4 candidate(s)"),
        ({"stages": {"top_k": 0}}, "top_k"),
        ({"stages": {"top_k": "2"}}, "top_k"),
        ({"stages": {"screen": "ncu"}}, "screen"),
        ({"stages": {"screen": "events", "k": 2}}, "k"),
        ({"budget_s": 0}, "budget_s"),
        ({"budget_s": "60"}, "budget_s"),
    ],
)
def test_invalid_stage_options_are_refused_naming_the_field(
    overrides: dict[str, Any], needle: str
) -> None:
    with pytest.raises(ValidationError) as info:
        staged_request(**overrides)
    assert needle in str(info.value)


def test_stages_need_a_profile_backend_that_measures_outside_the_candidate() -> None:
    with pytest.raises(NsightCoreError) as info:
        preflight_request(staged_request(backend="events"))
    assert info.value.error_class is ErrorClass.INVALID_REQUEST
    assert "backend 'events'" in info.value.message
    assert "set backend to 'ncu'" in info.value.hint


def test_a_staged_request_with_defaults_validates() -> None:
    request = staged_request(stages={}, budget_s=120)
    assert request.stages is not None
    assert (request.stages.screen, request.stages.top_k, request.budget_s) == ("cupti", 3, 120.0)
