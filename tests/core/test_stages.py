"""Staged evaluation on CPU: real judge and contestant processes under the events backend.

The profile stage normally runs under ncu, which this host lacks; `EVENTS_PROFILE` (an
`EngineConfig` with `profile_backend="events"`) runs it under events instead, so the stage logic (ranking, top k, budget, partial results)
is exercised end to end. tests/gpu/test_stages_gpu.py runs the real cupti screen + ncu.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.plan.config import EngineConfig
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
from nsight_core.staging.cost import H200_COSTS, estimate_staging, untimed_calls
from nsight_core.staging.requests import SCREEN_CHECK_NOTE, profile_request, screen_request
from tests.core.traced import run_traced

EVENTS_PROFILE = dataclasses.replace(EngineConfig.from_env(), profile_backend="events")
"""The profile stage under events: this host has no ncu."""

# Host-clock times are set by sleeps far apart (2, 8, 30 ms against the reference's 20 ms),
# so the ranking does not depend on this host's load. `wrong` is the fastest and incorrect.
# The reference and the input maker live in a file of their own, apart from the candidates.
REFERENCE = """
import time

def make(n):
    return (n,)

def ref(n):
    time.sleep(0.020)
    return n * 2
"""
REF = "reference.py:ref"
MAKE = "reference.py:make"

SOURCE = """
import time

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


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder that holds the reference's file (and whatever a test adds)."""
    folder = tmp_path_factory.mktemp("staged")
    (folder / "reference.py").write_text(REFERENCE)
    return folder


def staged_request(workdir: Path | None = None, **overrides: Any) -> ProfileRequest:
    fields: dict[str, Any] = {
        "reference": REF,
        "candidates": ["slow", "wrong", "mid", "fast"],
        "inputs": MAKE,
        "source": SOURCE,
        "reference_source": SOURCE,
        "workdir": str(workdir) if workdir is not None else None,
        "configs": [{"n": 3}],
        "runs": 3,
        "check": {"seeds": 1, "check_determinism": False},
        "stages": {"screen": "events", "top_k": 2},
    }
    fields.update(overrides)
    return ProfileRequest.model_validate(fields)


def test_screen_ranks_by_time_keeps_the_top_k_and_leaves_out_the_incorrect(
    tmp_path: Path, workdir: Path
) -> None:
    updates: list[StageUpdate] = []
    result = run_staged(
        staged_request(workdir),
        tmp_path / "job",
        result_id="staged",
        on_stage=updates.append,
        config=EVENTS_PROFILE,
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
    assert profile.Annotations == [REF, "fast", "mid"]
    assert {r.Annotation for r in result.rows if r.Stage == "profile"} == {REF, "fast", "mid"}
    assert {r.Annotation for r in result.rows if r.Stage == "screen"} == {
        REF,
        "fast",
        "mid",
        "slow",
    }
    assert all(r.Stage is not None for r in result.rows)
    assert {c.Stage for c in result.comparisons} == {"screen", "profile"}
    assert any(c.Stage == "screen" and not c.Passed for c in result.correctness)
    # The screen checked on nominal inputs only, and every candidate's screen check says so;
    # the profile stage's checks made the repeats and the regime calls.
    for check in result.correctness:
        noted = SCREEN_CHECK_NOTE in check.Reasons
        assert noted == (check.Stage == "screen" and check.Annotation != REF), check
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
    assert {r.Annotation for r in updates[1].partial.rows} == {REF, "fast", "mid", "slow"}
    assert [s.Status for s in updates[1].partial.stages] == ["done", "running"]


def test_a_tiny_budget_cuts_the_screen_and_skips_the_profile_stage_saying_why(
    tmp_path: Path, workdir: Path
) -> None:
    # One second is not enough for python and the imports of the screen's processes.
    t0 = time.monotonic()
    result = run_staged(
        staged_request(workdir, budget_s=1.0),
        tmp_path / "job",
        result_id="budget",
        config=EVENTS_PROFILE,
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
def test_cupti_screen_falls_back_to_events_where_cupti_cannot_run(
    tmp_path: Path, workdir: Path
) -> None:
    if importlib.util.find_spec("cupti") is not None:
        pytest.skip("cupti-python is installed here: no fallback to see")
    request = staged_request(
        workdir, candidates=["slow", "fast"], stages={"screen": "cupti", "top_k": 1}, runs=2
    )
    result = run_staged(request, tmp_path / "job", result_id="fb", config=EVENTS_PROFILE)
    screen, profile = result.stages
    assert screen.Backend == "events"
    assert screen.Reason is not None and "'cupti' cannot run here" in screen.Reason
    assert "screened with events" in result.message
    assert profile.Annotations == [REF, "fast"]


def test_a_screen_that_cannot_pay_is_skipped_and_every_candidate_profiled_in_one_job(
    tmp_path: Path, workdir: Path
) -> None:
    # The server's own costs (the H200's) price this request: four candidates, one metric
    # (one replay pass), so ncu would spare too little for a screen's start to pay back.
    updates: list[StageUpdate] = []
    result = run_staged(
        staged_request(workdir),
        tmp_path / "job",
        result_id="unscreened",
        on_stage=updates.append,
        config=EVENTS_PROFILE,
        costs=H200_COSTS,
    )
    assert result.status == "done", result.message
    screen, profile = result.stages
    assert (screen.Status, screen.Annotations, screen.Ranking) == ("skipped", [], [])
    assert screen.Reason is not None
    assert "staging estimate" in screen.Reason and "the screen cannot pay here" in screen.Reason
    assert "5 callables x 1 config(s) x (3 timed + 1 untimed) calls" in screen.Reason
    assert (profile.Status, profile.Annotations) == ("done", [REF, "slow", "wrong", "mid", "fast"])
    # One job, the profile stage's: every candidate checked and measured there, none screened.
    assert not (tmp_path / "job" / "screen").exists()
    assert {r.Stage for r in result.rows} == {"profile"}
    assert {r.Annotation for r in result.rows} == {REF, "slow", "mid", "fast"}
    assert any(c.Annotation == "wrong" and not c.Passed for c in result.correctness)
    assert result.message.startswith("staged: screen skipped: staging estimate")
    assert result.provenance is not None
    assert any("staging estimate" in n for n in result.provenance.notes)
    assert [(u.stage, u.index, u.count) for u in updates] == [("profile", 1, 2)]
    assert updates[0].eta is not None and updates[0].eta.fixed_s == H200_COSTS.ncu_start_s


# A candidate that games the screen: fast while no flag file exists beside it, which the test
# writes when the profile stage starts. The others' sleeps are far apart (ratios 4x, 2x and
# 0.67x against the reference's 80 ms, at least 20 ms between neighbours), so a loaded host's
# late wake-ups cannot reorder them and only the gamer's two stages disagree.
GAMING = """
import os
import time

FLAG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "profiling.flag")

def gamer(n):
    time.sleep(0.160 if os.path.exists(FLAG) else 0.002)
    return n * 2

def fast(n):
    time.sleep(0.020)
    return n * 2

def mid(n):
    time.sleep(0.040)
    return n * 2

def slow(n):
    time.sleep(0.120)
    return n * 2
"""


@pytest.mark.slow  # three jobs: the screen, the profile stage and its replacement job
def test_a_kept_candidate_that_gamed_the_screen_is_doubted_and_the_next_ranked_profiled(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "reference.py").write_text(REFERENCE.replace("0.020", "0.080"))
    (folder / "cands.py").write_text(GAMING)
    updates: list[StageUpdate] = []

    def on_stage(update: StageUpdate) -> None:
        updates.append(update)
        if update.stage == "profile":
            (folder / "profiling.flag").touch()

    request = staged_request(
        folder,
        candidates=["cands.py:slow", "cands.py:mid", "cands.py:gamer", "cands.py:fast"],
        source=None,
    )
    result = run_staged(
        request, tmp_path / "job", result_id="gamed", on_stage=on_stage, config=EVENTS_PROFILE
    )
    assert result.status == "done", result.message
    screen, profile = result.stages
    gamer, fast, mid = "cands.py:gamer", "cands.py:fast", "cands.py:mid"
    by_name = {r.Annotation: r for r in screen.Ranking}
    assert [r.Annotation for r in screen.Ranking][:3] == [gamer, fast, mid]
    # The gamer took a place in the top 2 with its screen number; ncu's stand-in saw it at
    # half the reference's speed, so the next-ranked candidate was profiled in its place.
    assert profile.Status == "done"
    assert profile.Annotations == [REF, gamer, fast, mid]
    assert profile.Reason is not None and "replace1/" in profile.Reason
    assert by_name[gamer].Suspicious and f"replaced by {mid}" in by_name[gamer].Why
    assert by_name[mid].Kept and f"in place of {gamer}" in by_name[mid].Why
    assert [(u.stage, u.calls) for u in updates] == [("screen", 15), ("profile", 9), ("profile", 6)]
    for stage in ("screen", "profile"):
        rows = [r for r in result.rows if r.Annotation == gamer and r.Stage == stage]
        assert rows and all(r.Trust == "suspicious" for r in rows), rows
        assert all(any("screen overrated" in x for x in r.Reasons) for r in rows)
    honest = [r for r in result.rows if r.Annotation in (REF, fast, mid)]
    assert not any("screen overrated" in x for r in honest for x in r.Reasons)
    # The replacement job measured the reference again for its own comparisons; the result
    # keeps one profile row of it, and the replacement's comparison.
    assert len([r for r in result.rows if r.Annotation == REF and r.Stage == "profile"]) == 1
    assert any(c.Annotation == mid and c.Stage == "profile" for c in result.comparisons)
    assert any(k.startswith("replace1_") for k in result.artifacts)
    assert f"screen overrated {gamer}" in result.message


TEN_METRICS = [
    "gpu__time_duration.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "smsp__inst_executed.sum",
    "l1tex__t_bytes.sum",
    "lts__t_bytes.sum",
    "smsp__warps_launched.sum",
    "sm__cycles_elapsed.avg.per_second",
]


def _bench_shaped(candidates: int, metrics: list[str]) -> ProfileRequest:
    """Shaped like tools/bench/bench_stages.py's requests (issue 27's two cases)."""
    return staged_request(
        candidates=[f"c{i:02d}" for i in range(candidates)],
        metrics=metrics,
        check={"seeds": 1},
        stages={"screen": "cupti", "top_k": 3},
    )


def test_the_estimate_skips_the_screen_where_staging_lost_on_the_h200_and_keeps_it_where_it_won() -> (
    None
):
    small = estimate_staging(_bench_shaped(8, TEN_METRICS[:2]), H200_COSTS, EngineConfig.from_env())
    large = estimate_staging(_bench_shaped(32, TEN_METRICS), H200_COSTS, EngineConfig.from_env())
    # Three timed runs; untimed: the warm-up, then in the profile stage the probes and the
    # regime calls with the reference's runs on their inputs (the screen makes neither).
    assert (small.timed, small.untimed, small.screen_untimed) == (3, 15, 1)
    assert (large.timed, large.untimed, large.screen_untimed) == (3, 15, 1)
    assert (small.callables, small.kept, large.callables, large.kept) == (9, 4, 33, 4)
    assert small.passes < large.passes
    assert not small.pays and small.staged_s > small.all_ncu_s
    assert large.pays and large.staged_s <= 0.9 * large.all_ncu_s
    # Every number of the estimate can be redone from the costs and the request's shape:
    # ncu replays the timed calls once per pass, the untimed ones run once.
    c = H200_COSTS
    assert math.isclose(small.screen_s, c.screen_start_s + 9 * 4 * c.screen_call_s)
    per = 3 * large.passes + 15
    assert math.isclose(large.all_ncu_s, c.ncu_start_s + 33 * per * c.ncu_call_pass_s)
    assert math.isclose(large.kept_ncu_s, c.ncu_start_s + 4 * per * c.ncu_call_pass_s)
    text = small.explain()
    assert f"{small.screen_s:.1f} s" in text and f"{small.all_ncu_s:.1f} s" in text
    assert "3 timed + 1 untimed" in text and "15 untimed calls per config" in text
    assert "cannot pay" in text and "the screen pays" in large.explain()


@pytest.mark.parametrize(
    ("check", "warmup", "runs", "untimed"),
    [
        ({"seeds": 1, "check_determinism": False, "regimes": False}, 1, 3, 1),
        ({"seeds": 1, "regimes": False}, 1, 3, 7),  # two repeats, two decoys, their references
        ({"seeds": 8, "check_determinism": False, "regimes": False}, 1, 3, 5),
        ({"seeds": 1, "check_determinism": False}, 4, 3, 12),  # four regimes, their references
        ({"enabled": False}, 0, 2, 1),  # always one untimed call
    ],
)
def test_untimed_calls_count_the_calls_the_judge_makes(
    check: dict[str, Any], warmup: int, runs: int, untimed: int
) -> None:
    request = staged_request(check=check, warmup=warmup, runs=runs)
    assert untimed_calls(request.check, request) == untimed


_COUNT = """
import torch

def make_inputs(rows, cols, path):
    return torch.randn(rows, cols), path

def ref(x, path):
    return torch.softmax(x, dim=-1)

def trace(x, path):
    with open(path, "a") as fh:
        fh.write("call\\n")
    return torch.softmax(x, dim=-1)
"""


def test_the_estimate_counts_as_many_calls_as_a_candidate_gets(tmp_path: Path) -> None:
    # A candidate that logs its calls gets the estimate's calls per config, less the
    # reference's runs on the decoys' and regimes' inputs, which the judge makes itself.
    result, lines = run_traced(tmp_path, _COUNT)
    est = estimate_staging(
        staged_request(check={}, warmup=1, runs=5, stages={"screen": "events", "top_k": 1}),
        H200_COSTS,
        EngineConfig.from_env(),
    )
    assert result.correctness and all(c.Passed for c in result.correctness)
    reference_runs = 2 + 4  # one per decoy and one per regime call
    assert len(lines) == est.timed + est.untimed - reference_runs, lines


def test_more_candidates_or_more_replay_passes_make_the_screen_pay_sooner() -> None:
    def pays(candidates: int, metrics: list[str]) -> bool:
        return estimate_staging(
            _bench_shaped(candidates, metrics), H200_COSTS, EngineConfig.from_env()
        ).pays

    assert not pays(4, TEN_METRICS[:1])
    # One pass: a screen call costs about one ncu call, but the screen spares the left-out
    # candidates' probes and regime calls, which only the profile stage makes.
    assert not pays(8, TEN_METRICS[:1]) and pays(32, TEN_METRICS[:1])
    assert [pays(n, TEN_METRICS) for n in (8, 16, 32)] == sorted(
        pays(n, TEN_METRICS) for n in (8, 16, 32)
    )
    assert pays(32, TEN_METRICS)


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
        Baseline=REF,
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
        preflight_request(staged_request(backend="events"), config=EngineConfig.from_env())
    assert info.value.error_class is ErrorClass.INVALID_REQUEST
    assert "backend 'events'" in info.value.message
    assert "set backend to 'ncu'" in info.value.hint


def test_a_staged_request_with_defaults_validates() -> None:
    request = staged_request(stages={}, budget_s=120)
    assert request.stages is not None
    assert (request.stages.screen, request.stages.top_k, request.budget_s) == ("cupti", 3, 120.0)


def test_the_screen_checks_on_nominal_inputs_and_the_profile_stage_makes_every_check() -> None:
    request = staged_request(check={"seeds": 2, "atol": 1e-3})
    screen = screen_request(request, "events", 60.0).check
    profile = profile_request(request, "ncu", ["fast"], 60.0).check
    assert (screen.check_determinism, screen.regimes, screen.seeds, screen.atol) == (
        False,
        False,
        2,
        1e-3,
    )
    assert profile == request.check and profile.check_determinism and profile.regimes
