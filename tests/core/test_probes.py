"""The determinism probes and their decoys: which calls repeat or nearly repeat an earlier
call's inputs, how a near repeat is made, and that no repeat is ever timed."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from nsight_core.judge.probes import (
    DECOY_POSITIONS,
    REPEATS_PER_CONFIG,
    Extra,
    make_decoy,
    near_repeat,
)
from nsight_core.judge.probes import draw_plan as plan_of
from nsight_core.judge.regimes import REGIMES
from nsight_core.runtime.check import clone_args
from tests.core.traced import run_traced


def _extras(untimed: int, runs: int, rng: random.Random) -> list[tuple[int | None, Extra]]:
    """(the fresh call an extra follows, None: after the timed runs; the extra)."""
    plan = plan_of(rng, untimed, runs)
    return [(b, e) for b, xs in plan.after.items() for e in xs] + [(None, e) for e in plan.post]


@pytest.mark.parametrize(("untimed", "runs"), [(1, 3), (1, 5), (3, 1), (2, 10)])
def test_each_chosen_call_gets_a_repeat_and_a_decoy_and_none_falls_among_the_timed_runs(
    untimed: int, runs: int
) -> None:
    rng = random.Random(1)
    for _ in range(500):
        extras = _extras(untimed, runs, rng)
        assert len(extras) == 2 * REPEATS_PER_CONFIG
        per_source = Counter((e.source, e.decoy) for _, e in extras)
        assert all(n == 1 for n in per_source.values())  # one repeat and one decoy each
        assert {e.decoy for _, e in extras} == {False, True}
        for after, e in extras:
            assert 0 <= e.source < untimed + runs
            if after is None:
                continue  # after every timed run: any fresh call is earlier
            # Before the timed runs: right after an untimed fresh call at or after its source.
            assert e.source <= after < untimed
        # One chosen call among the timed runs (its extras follow them), one untimed.
        sources = {e.source for _, e in extras}
        assert any(s >= untimed for s in sources) and any(s < untimed for s in sources)
        assert all(after is None for after, e in extras if e.source >= untimed)


def test_where_the_extras_fall_and_what_they_repeat_is_not_predictable() -> None:
    rng = random.Random(2)
    untimed, runs, draws = 1, 5, 4000
    seen = [_extras(untimed, runs, rng) for _ in range(draws)]
    sources = Counter(e.source for extras in seen for _, e in extras)
    assert set(sources) == set(range(untimed + runs))  # every fresh call, timed ones too
    # The untimed call's extras come right after it or after the timed runs, both often.
    where = Counter(after for extras in seen for after, e in extras if e.source == 0)
    assert set(where) == {0, None} and min(where.values()) > 0.3 * sum(where.values())


def _softmax_inputs(seed: int, rows: int = 8, cols: int = 64) -> Any:
    torch.manual_seed(seed)
    return (torch.randn(rows, cols) * 3,), {}


def test_a_near_repeat_changes_a_few_positions_of_a_copy_to_the_fresh_draws_values() -> None:
    source, fresh = _softmax_inputs(1), _softmax_inputs(2)
    kept = clone_args(source)
    (near,) = near_repeat(source, fresh, random.Random(3), [DECOY_POSITIONS])
    x, y, f = source[0][0], near[0][0], fresh[0][0]
    changed = (x != y).nonzero()
    assert len(changed) == DECOY_POSITIONS
    assert all(y[i, j] == f[i, j] for i, j in changed.tolist())
    assert torch.equal(source[0][0], kept[0][0])  # the source is left as it was


def test_a_near_repeat_works_on_strided_numpy_and_nested_inputs() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((16, 4)).T, rng.standard_normal((16, 4)).T
    t, u = torch.randn(16, 8).t(), torch.randn(16, 8).t()
    source = ((a, [t]), {"k": 3})
    (near,) = near_repeat(source, ((b, [u]), {"k": 3}), random.Random(1), [6])
    diff = int((near[0][0] != a).sum()) + int((near[0][1][0] != t).sum())
    assert diff == 6 and near[1] == {"k": 3}
    assert near[0][1][0].stride() == t.stride()


@pytest.mark.parametrize(
    "structured",
    [
        torch.arange(64.0).reshape(8, 8),  # sorted along its last dimension
        (lambda m: m + m.T)(torch.randn(6, 6)),  # symmetric
        torch.randint(0, 10, (8, 8)),  # integers (indices, labels)
    ],
    ids=["sorted", "symmetric", "integer"],
)
def test_a_near_repeat_leaves_structured_arrays_alone(structured: torch.Tensor) -> None:
    other = structured + 1
    assert not list(near_repeat(((structured,), {}), ((other,), {}), random.Random(0), [2]))


def test_a_near_repeat_changes_only_where_the_draws_differ() -> None:
    # A mask every draw makes alike is never changed; the values beside it are.
    mask = torch.tril(torch.ones(8, 8)) * 0.5 + torch.eye(8) * 0.25
    x, y = torch.randn(8, 8), torch.randn(8, 8)
    for near in near_repeat(((x, mask), {}), ((y, mask.clone()), {}), random.Random(4), [2, 32]):
        assert torch.equal(near[0][1], mask) and not torch.equal(near[0][0], x)


def _mean(inputs: Any) -> Any:
    (x,), _ = clone_args(inputs)
    return x.mean()


def _passes(e: Any, o: Any) -> bool:
    return bool(abs(float(e) - float(o)) <= 1e-5)


def test_a_decoy_changes_more_positions_while_an_earlier_answer_would_still_pass() -> None:
    # A mean over many elements barely moves when two of them change: the decoy grows until
    # the earlier output fails it.
    torch.manual_seed(0)
    source: Any = ((torch.randn(100_000),), {})
    fresh: Any = ((torch.randn(100_000),), {})
    earlier = _mean(source)
    made = make_decoy(
        source, earlier, draw=fresh, expect=_mean, replay_passes=_passes, rng=random.Random(5)
    )
    assert made is not None
    near, expected = made
    assert int((near[0][0] != source[0][0]).sum()) > DECOY_POSITIONS
    assert not _passes(expected, earlier)


def test_no_decoy_where_the_reference_refuses_it_or_it_brings_nan() -> None:
    source, fresh = _softmax_inputs(1), _softmax_inputs(2)
    earlier = torch.softmax(source[0][0], -1)

    def refuses(inputs: Any) -> Any:
        raise ValueError("not an input this reference takes")

    def nan(inputs: Any) -> Any:
        return torch.full_like(earlier, float("nan"))

    for expect in (refuses, nan):
        made = make_decoy(
            source,
            earlier,
            draw=fresh,
            expect=expect,
            replay_passes=lambda e, o: False,
            rng=random.Random(0),
        )
        assert made is None


_TRACE = """
import sys
import torch

_seen = []

def make_inputs(rows, cols, path):
    return torch.randn(rows, cols), path

def ref(x, path):
    return torch.softmax(x, dim=-1)

def trace(x, path):
    frame, timed = sys._getframe(1), False
    while frame is not None:
        timed = timed or frame.f_code.co_name in ("time_call", "timed_call")
        frame = frame.f_back
    kind = "fresh"
    for s in _seen:
        if torch.equal(s, x):
            kind = "repeat"
            break
        if (s != x).sum() < x.numel() // 4:
            kind = "near"
    _seen.append(x.clone())
    with open(path, "a") as fh:
        fh.write(f"{'timed' if timed else 'untimed'} {kind}\\n")
    return torch.softmax(x, dim=-1)
"""


def test_no_repeat_or_decoy_is_ever_timed(tmp_path: Path) -> None:
    # A candidate that keeps every input it saw logs what each call was: the timed runs all
    # got fresh inputs; the repeats and the decoys came untimed.
    result, lines = run_traced(tmp_path, _TRACE)
    calls = Counter(lines)
    assert calls == {
        "untimed fresh": 1 + len(REGIMES),  # the warm-up, then one call per input regime
        "timed fresh": 5,
        "untimed repeat": REPEATS_PER_CONFIG,
        "untimed near": REPEATS_PER_CONFIG,
    }, calls
    assert all(c.Passed for c in result.correctness)
