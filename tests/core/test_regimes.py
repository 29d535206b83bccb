"""Checks on inputs beyond the nominal regime (judge/regimes.py): which inputs a regime
changes and how, the tolerance it is judged with, when the reference refuses it, and real
candidates through the real pipeline (events backend, CPU torch) that are accurate at the
nominal scale only."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from nsight_core.judge import regimes
from nsight_core.judge.regimes import (
    REGIMES,
    ConfigRegimes,
    RegimeCheck,
    draw_plan,
    leaves_of,
    nominal_of,
    transform,
)
from nsight_core.judge.verdict import Tally
from nsight_core.pipeline import run_profile_job
from nsight_core.request import CheckSpec, ProfileRequest
from nsight_core.results import ProfileResult
from nsight_core.runtime import formats
from tests.core.traced import run_traced

BY_NAME = {r.name: r for r in REGIMES}


def _regime(name: str) -> regimes.Regime:
    return BY_NAME[name]


# -- where the calls fall ----------------------------------------------------------------------


@pytest.mark.parametrize("untimed", [1, 3])
def test_each_regime_is_called_once_before_the_timed_runs_or_after_them_in_order(
    untimed: int,
) -> None:
    rng = random.Random(0)
    where: Counter[int | None] = Counter()
    for _ in range(500):
        plan = draw_plan(rng, untimed)
        called = [r for k in sorted(plan.after) for r in plan.after[k]] + plan.post
        assert called == list(REGIMES)  # each once, in order: the first failure is named
        assert all(0 <= k < untimed for k in plan.after)  # never among the timed runs
        where.update(k for k, rs in plan.after.items() for _ in rs)
        where.update([None] * len(plan.post))
    assert set(where) == {*range(untimed), None}  # both places, drawn


def test_a_plan_hands_out_its_regimes_after_the_fresh_call_they_follow() -> None:
    plan = draw_plan(random.Random(3), 2)
    due = [plan.next_fresh() for _ in range(5)]  # two untimed fresh calls, three timed
    assert [r for rs in due for r in rs] + plan.post == list(REGIMES)
    assert due[2:] == [[], [], []]


# -- the inputs -------------------------------------------------------------------------------


def _draws() -> tuple[Any, Any]:
    w = torch.randn(16, 8)  # fixed weights: every draw makes them alike
    mask = torch.tril(torch.ones(16, 16))
    idx = torch.randint(0, 16, (4,))

    def make() -> Any:
        return (torch.randn(16, 16) * 3, w.clone(), idx.clone()), {"mask": mask.clone()}

    return make(), make()


@pytest.mark.parametrize("name", [r.name for r in REGIMES])
def test_only_floating_arrays_that_vary_between_draws_are_transformed(name: str) -> None:
    fresh, other = _draws()
    kept = [t.clone() for t in (*fresh[0], fresh[1]["mask"])]
    leaves = leaves_of(fresh, other)
    assert [leaf.varies for leaf in leaves] == [True, False, False, False]
    made = transform(_regime(name), fresh, leaves, random.Random(1))
    assert made is not None
    (x, w, idx), kw = made.inputs
    assert (
        torch.equal(w, kept[1]) and torch.equal(idx, kept[2]) and torch.equal(kw["mask"], kept[3])
    )
    assert torch.equal(fresh[0][0], kept[0])  # the draw itself is left as it was
    assert not torch.equal(x, kept[0])
    regime = _regime(name)
    if not regime.heavy:
        assert torch.allclose(x, kept[0] * regime.scale)
        assert made.grew == pytest.approx(abs(regime.scale), rel=1e-6)
    else:
        assert made.grew == pytest.approx(float(x.abs().max() / kept[0].abs().max()))


def test_the_heavy_tailed_factor_keeps_signs_and_has_a_heavy_tail() -> None:
    x = torch.rand(200_000, dtype=torch.float64) + 0.5
    base: Any = ((x,), {})
    (leaf,) = leaves_of(base, ((torch.rand(200_000, dtype=torch.float64),), {}))
    made = transform(_regime("heavy-tailed"), base, [leaf], random.Random(2))
    assert made is not None
    f = made.inputs[0][0] / x  # the factor
    assert bool((f >= 0).all())
    assert 0.7 < float(f.median()) < 0.95  # |t| with 2 degrees of freedom: median 0.816
    assert float(f.max()) > 100  # P(|t| > k) ~ 1/k^2: hundreds of times the median


def test_structure_the_maker_gives_is_kept() -> None:
    edges = torch.sort(torch.randn(4, 32), dim=-1).values  # sorted: bin edges
    a = torch.randn(6, 6)
    sym = a + a.T
    fresh: Any = ((edges, sym), {})
    other: Any = ((torch.sort(torch.randn(4, 32), dim=-1).values, sym + 1), {})
    leaves = leaves_of(fresh, other)
    assert [(leaf.ordered, leaf.symmetric) for leaf in leaves] == [(True, False), (False, True)]
    rng = random.Random(0)
    flipped = transform(_regime("sign-flipped"), fresh, leaves, rng)
    assert flipped is not None  # the symmetric one is negated, the sorted one is not
    assert torch.equal(flipped.inputs[0][0], edges) and torch.equal(flipped.inputs[0][1], -sym)
    assert transform(_regime("heavy-tailed"), fresh, leaves, rng) is None  # changes neither
    scaled = transform(_regime("scaled x64"), fresh, leaves, rng)
    assert scaled is not None and torch.equal(scaled.inputs[0][0], edges * 64)


def test_values_stay_within_the_dtypes_range_and_numpy_arrays_are_transformed_too() -> None:
    big: Any = ((torch.full((8,), 30000.0, dtype=torch.float16),), {})
    leaves = leaves_of(big, ((torch.zeros(8, dtype=torch.float16),), {}))
    made = transform(_regime("scaled x64"), big, leaves, random.Random(0))
    assert made is not None and bool(torch.isfinite(made.inputs[0][0]).all())
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 7)).astype(np.float32).T  # strided
    fresh: Any = ((a, np.arange(3)), {})
    leaves = leaves_of(fresh, ((rng.standard_normal((7, 5)).astype(np.float32), np.arange(3)), {}))
    for regime in REGIMES:
        made = transform(regime, fresh, leaves, random.Random(1))
        assert made is not None
        y, ints = made.inputs[0]
        assert y.dtype == np.float32 and y.shape == a.shape and np.array_equal(ints, np.arange(3))
        if not regime.heavy:
            np.testing.assert_allclose(y, a * np.float32(regime.scale), rtol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.bfloat16], ids=str)
def test_low_precision_inputs_keep_their_dtype(dtype: torch.dtype) -> None:
    fresh: Any = ((torch.randn(8, 16).to(dtype),), {})
    leaves = leaves_of(fresh, ((torch.randn(8, 16).to(dtype),), {}))
    for regime in REGIMES:
        made = transform(regime, fresh, leaves, random.Random(0))
        assert made is not None and made.inputs[0][0].dtype == dtype
        assert bool(torch.isfinite(made.inputs[0][0].float()).all())


# -- the tolerance ------------------------------------------------------------------------------


def _judge(check: RegimeCheck, expected: Any, actual: Any, **tol: Any) -> Tally:
    tally = Tally()
    check.judge(tally, expected, actual, atol=tol.get("atol"), rtol=tol.get("rtol"), bound=None)
    return tally


def test_atol_scales_with_each_output_arrays_magnitude_against_nominal() -> None:
    nominal = nominal_of((torch.ones(4), torch.full((4,), 0.5)))
    check = RegimeCheck(_regime("scaled x64"), 2, nominal)
    expected = (torch.full((4,), 64.0), torch.full((4,), 0.5))  # only the first grew, 64x
    off = 1e-3 * 64 * 0.9
    assert _judge(check, expected, (expected[0] + off, expected[1]), atol=1e-3, rtol=0.0).passed
    # The same error on the array that did not grow is 58x its atol.
    failed = _judge(check, expected, (expected[0], expected[1] + off), atol=1e-3, rtol=0.0)
    assert not failed.passed
    assert failed.reasons[0].startswith("output mismatch: output[1]: ")
    # Unset, atol is the dtype's (float32: 1e-5), scaled the same way.
    assert _judge(check, expected, (expected[0] + 1e-5 * 64 * 0.9, expected[1]), rtol=0.0).passed
    assert not _judge(
        check, expected, (expected[0] + 1e-5 * 64 * 1.5, expected[1]), rtol=0.0
    ).passed


def test_atol_shrinks_with_the_output_but_not_below_the_dtypes_smallest_normal() -> None:
    check = RegimeCheck(_regime("scaled x1e-3"), 0, nominal_of(torch.ones(4)))
    small = torch.full((4,), 1e-3)
    assert not _judge(check, small, small + 5e-5, atol=1e-4, rtol=0.0).passed  # atol 1e-7 here
    assert _judge(check, small, small + 5e-8, atol=1e-4, rtol=0.0).passed
    # float16's own atol (1e-5) lies below its smallest normal (6.1e-5): it is kept.
    half = RegimeCheck(_regime("scaled x1e-3"), 0, nominal_of(torch.ones(4, dtype=torch.float16)))
    tiny = torch.full((4,), 1e-6, dtype=torch.float16)
    assert _judge(half, tiny, tiny + 8e-6, rtol=0.0).passed


def test_rtol_grows_with_the_inputs_magnitude() -> None:
    # A softmax through log-sum-exp rounds lse (about 1000 here) to eps times it, up to
    # 6e-5: honest, and now and then wrong by the float32 default rtol of 1e-5.
    torch.manual_seed(0)
    nominal = nominal_of(torch.softmax(torch.randn(32, 64) * 4, dim=-1))
    as_nominal = RegimeCheck(_regime("scaled x64"), 0, nominal)
    grown = RegimeCheck(_regime("scaled x64"), 0, nominal, grew=64.0)
    failed = 0
    for _ in range(20):
        x = torch.randn(32, 64) * 4 * 64
        expected = torch.softmax(x, dim=-1)
        honest = torch.exp(x - torch.logsumexp(x, dim=-1, keepdim=True))
        failed += not _judge(as_nominal, expected, honest).passed
        assert _judge(grown, expected, honest).passed
        assert not _judge(grown, expected, expected * (1 + 1e-3)).passed  # 64x rtol, no more
    assert failed > 0


def test_a_regime_failure_names_the_inputs_the_regime_and_the_config() -> None:
    nominal = nominal_of(torch.ones(3))
    check = RegimeCheck(_regime("scaled x64"), 0, nominal)
    into, sub = Tally(calls=5), _judge(check, torch.ones(3), torch.full((3,), float("nan")))
    check.fold(into, sub)
    assert not into.passed and into.calls == 6
    assert into.reasons[0].startswith(
        "output mismatch under inputs x64 (regime 'scaled x64', config 0): output: "
    )
    assert into.max_abs == 0.0  # a regime's errors are in its own units: only its Reason has them
    other = Tally()
    check.fold(other, Tally(passed=False, reasons=["mutated input x (seen in the judge's slot)"]))
    assert other.reasons == [
        "mutated input x (seen in the judge's slot) (under inputs x64: regime 'scaled x64', "
        "config 0)"
    ]


def test_a_regime_the_reference_refuses_is_not_checked_and_says_why() -> None:
    rs = ConfigRegimes(1, nominal_of(torch.ones(3)))
    inputs: Any = ((torch.ones(3),), {})

    def raises(_: Any) -> Any:
        raise ValueError("negative lengths")

    out, why = rs.expected(_regime("sign-flipped"), inputs, raises)
    assert out is None and why is not None
    assert why == (
        "config 1: negated inputs (regime 'sign-flipped') not checked: the reference raised "
        "ValueError there"
    )
    out, why = rs.expected(_regime("scaled x64"), inputs, lambda _: torch.tensor([1.0, np.inf]))
    assert out is None and why is not None and "NaN or an infinity" in why
    assert set(rs.refused) == {"sign-flipped", "scaled x64"}
    # Where the nominal output has NaN already, NaN in a regime is the reference's own.
    nan_ok = ConfigRegimes(1, nominal_of(torch.tensor([np.nan, 1.0])))
    out, why = nan_ok.expected(_regime("scaled x64"), inputs, lambda _: torch.tensor([np.nan]))
    assert why is None and out is not None


def test_no_regime_where_a_gpu_mode_tasks_check_judges(monkeypatch: pytest.MonkeyPatch) -> None:
    assert regimes.applies()
    monkeypatch.setattr(formats, "task_check", lambda: object())
    assert not regimes.applies()


# -- real candidates through the real pipeline -------------------------------------------------

_SOFTMAX = """
import torch

def make_inputs(rows, cols):
    return (torch.randn(rows, cols) * 3,)

def ref(x):
    return torch.softmax(x, dim=-1)

def via_logsumexp(x):  # honest, rounds lse to eps times the logits' magnitude
    return torch.exp(x - torch.logsumexp(x, dim=-1, keepdim=True))

def refuses_large(x):  # raises where the maker's inputs never reach
    assert float(x.abs().max()) < 100, "logits out of range"
    return torch.softmax(x, dim=-1)

def naive(x):  # no max subtraction: exp overflows once a logit passes ~88
    e = x.exp()
    return e / e.sum(dim=-1, keepdim=True)

def stable(x):
    e = (x - x.max(dim=-1, keepdim=True).values).exp()
    return e / e.sum(dim=-1, keepdim=True)

def clip_outliers(x):  # scale-free, but clips what lies 10x beyond the row's median
    m = x.abs().median(dim=-1, keepdim=True).values
    return torch.softmax(torch.maximum(torch.minimum(x, 10 * m), -10 * m), dim=-1)
"""

_NORMALIZE = """
import torch

def make_inputs(rows, cols):
    return (torch.randn(rows, cols),)

def ref(x):
    return torch.nn.functional.normalize(x, dim=-1)

def eps_in_norm(x):  # an epsilon that matters once the rows' norms are small
    return x / (x.norm(dim=-1, keepdim=True) + 1e-6)
"""

_SQRT = """
import torch

def make_inputs(rows, cols):
    return (torch.rand(rows, cols),)  # never negative

def ref(x):
    return torch.sqrt(x.abs())

def assumes_nonnegative(x):
    return torch.sqrt(x)

def sqrt_ref(x):
    return torch.sqrt(x)  # NaN for negative inputs: the reference refuses the negated ones
"""

_FIXED = """
import torch

_W = torch.arange(64.0).reshape(8, 8) / 64

def make_inputs(rows):
    return torch.randn(rows, 8), torch.randint(0, rows, (rows,)), _W

def ref(x, idx, w):
    assert torch.equal(w, _W), "fixed weights changed"
    return x[idx] @ w

def gather_mm(x, idx, w):
    return torch.index_select(x, 0, idx) @ w
"""


def _job(
    tmp_path: Path,
    source: str,
    candidates: list[str],
    *,
    reference: str = "ref",
    config: dict[str, Any] | None = None,
    check: CheckSpec | None = None,
    name: str = "job",
) -> ProfileResult:
    request = ProfileRequest(
        reference=reference,
        candidates=candidates,
        inputs="make_inputs",
        source=source,
        reference_source=source,
        configs=[config or {"rows": 32, "cols": 64}],
        runs=3,
        warmup=1,
        backend="events",
        check=check or CheckSpec(seeds=2),
    )
    result = run_profile_job(request, tmp_path / name, result_id=name)
    assert result.status in ("done", "failed"), result.message
    return result


def _verdicts(result: ProfileResult) -> dict[str, tuple[bool, str | None, str]]:
    return {
        c.Annotation: (c.Passed, c.ErrorClass, " | ".join(c.Reasons)) for c in result.correctness
    }


def test_a_candidate_accurate_at_the_nominal_scale_only_fails_the_regime_it_breaks_in(
    tmp_path: Path,
) -> None:
    result = _job(
        tmp_path, _SOFTMAX, ["naive", "stable", "clip_outliers", "via_logsumexp", "refuses_large"]
    )
    got = _verdicts(result)
    passed, error, reasons = got["naive"]
    assert (passed, error) == (False, "incorrect")
    assert reasons.startswith(
        "output mismatch under inputs x64 (regime 'scaled x64', config 0): output: "
    )
    assert "NaN/Inf" in reasons
    assert got["clip_outliers"][:2] == (False, "incorrect")
    assert "(regime 'heavy-tailed', config 0)" in got["clip_outliers"][2]
    assert got["stable"] == got["via_logsumexp"] == (True, None, "")
    # A candidate that raises in a regime fails as one that raises anywhere, named for it.
    (raised,) = [c for c in result.correctness if c.Annotation == "refuses_large"]
    assert (raised.Passed, raised.ErrorClass) == (False, "runtime_error")
    assert "logits out of range" in (raised.Error or "")
    assert "(under inputs x64: regime 'scaled x64', config 0)" in (raised.Error or "")
    # Never timed: a candidate that fails a regime has no timed rows; the honest one has.
    assert all(r.NumRuns == 0 for r in result.rows if r.Annotation == "naive")
    (stable,) = [r for r in result.rows if r.Annotation == "stable"]
    assert stable.NumRuns == 3 and stable.Trust in ("ok", "noisy")
    seeds = {c.Annotation: c.Seeds for c in result.correctness}
    # 4 fresh calls, 4 probes, 4 regimes (the honest candidate makes every call).
    assert seeds["stable"] == 12


def test_regimes_off_lets_such_a_candidate_pass(tmp_path: Path) -> None:
    result = _job(
        tmp_path, _SOFTMAX, ["naive"], check=CheckSpec(seeds=2, regimes=False), name="off"
    )
    assert _verdicts(result)["naive"] == (True, None, "")
    assert result.correctness[0].Seeds == 8  # 4 fresh calls and 4 probes


def test_an_epsilon_that_matters_at_small_scale_fails_at_x1e_3(tmp_path: Path) -> None:
    passed, error, reasons = _verdicts(_job(tmp_path, _NORMALIZE, ["eps_in_norm"]))["eps_in_norm"]
    assert (passed, error) == (False, "incorrect")
    assert reasons.startswith("output mismatch under inputs x1e-3 (regime 'scaled x1e-3'")


def test_a_candidate_that_assumes_non_negative_inputs_fails_negated_ones(tmp_path: Path) -> None:
    result = _job(tmp_path, _SQRT, ["assumes_nonnegative"])
    passed, error, reasons = _verdicts(result)["assumes_nonnegative"]
    assert (passed, error) == (False, "incorrect")
    assert "(regime 'sign-flipped', config 0)" in reasons


def test_where_the_reference_refuses_a_regime_it_is_not_checked_and_the_notes_say_so(
    tmp_path: Path,
) -> None:
    # sqrt gives NaN for the negated inputs: the regime is not the reference's to judge.
    result = _job(tmp_path, _SQRT, ["assumes_nonnegative"], reference="sqrt_ref")
    assert _verdicts(result)["assumes_nonnegative"] == (True, None, "")
    assert result.correctness[0].Seeds == 11  # 4 fresh, 4 probes, 3 regimes
    assert result.provenance is not None
    notes = [n for n in result.provenance.notes if "not checked" in n]
    assert notes == [
        "config 0: negated inputs (regime 'sign-flipped') not checked: the reference gives NaN "
        "or an infinity there"
    ]


def test_integer_inputs_and_fixed_weights_are_left_alone(tmp_path: Path) -> None:
    # The reference asserts its weights are the fixed ones and indexes with the integers: a
    # regime that changed either would be refused (and noted) or fail the honest candidate.
    result = _job(tmp_path, _FIXED, ["gather_mm"], config={"rows": 16})
    assert _verdicts(result)["gather_mm"] == (True, None, "")
    assert result.correctness[0].Seeds == 12
    assert result.provenance is not None
    assert not [n for n in result.provenance.notes if "not checked" in n]


_TRACE = """
import sys
import torch

def make_inputs(rows, cols, path):
    return torch.randn(rows, cols), path

def ref(x, path):
    return torch.softmax(x, dim=-1)

def trace(x, path):
    frame, timed = sys._getframe(1), False
    while frame is not None:
        timed = timed or frame.f_code.co_name in ("time_call", "timed_call")
        frame = frame.f_back
    with open(path, "a") as fh:
        fh.write(f"{'timed' if timed else 'untimed'} {float(x.abs().max()):.6g}\\n")
    return torch.softmax(x, dim=-1)
"""


def test_no_regime_call_is_ever_timed(tmp_path: Path) -> None:
    result, lines = run_traced(tmp_path, _TRACE)
    calls = [line.split() for line in lines]
    timed = [float(m) for kind, m in calls if kind == "timed"]
    untimed = [float(m) for kind, m in calls if kind == "untimed"]
    assert len(timed) == 5 and all(1.0 < m < 10.0 for m in timed)  # nominal inputs only
    assert len(untimed) == 1 + 4 + len(REGIMES)  # warm-up, probes, regimes
    assert any(m < 0.01 for m in untimed)  # x1e-3
    assert any(m > 64.0 for m in untimed)  # x64
    assert all(c.Passed for c in result.correctness)
