"""The determinism probes: which calls of a config repeat an earlier call's inputs."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from nsight_core.judge.core import PROBES_PER_CONFIG, draw_probes


@pytest.mark.parametrize(("untimed", "runs"), [(1, 3), (1, 5), (3, 1), (2, 10)])
def test_probes_repeat_earlier_fresh_calls_and_leave_every_fresh_call_in_place(
    untimed: int, runs: int
) -> None:
    rng = random.Random(1)
    n = untimed + PROBES_PER_CONFIG + runs
    for _ in range(500):
        plan = draw_probes(rng, untimed, runs)
        assert len(plan) == PROBES_PER_CONFIG
        assert 0 not in plan and all(p < n for p in plan)
        # Each repeats a call that had fresh inputs, made before it.
        assert all(src < p and src not in plan for p, src in plan.items())
        assert n - len(plan) == untimed + runs  # the fresh calls the config had before
        first_timed = untimed + PROBES_PER_CONFIG
        # One among the untimed calls, one among the timed runs.
        assert any(p < first_timed for p in plan) and any(p >= first_timed for p in plan)


def test_every_position_but_the_first_can_be_a_probe_and_none_is_predictable() -> None:
    # A candidate that counts calls learns nothing: with the defaults (warm-up 1, seeds 3,
    # runs 5) each of positions 1..7 is a probe in a good share of configs, none always.
    rng = random.Random(2)
    untimed, runs, draws = 1, 5, 4000
    seen = Counter(p for _ in range(draws) for p in draw_probes(rng, untimed, runs))
    n = untimed + PROBES_PER_CONFIG + runs
    assert set(seen) == set(range(1, n))
    assert all(0.05 < seen[p] / draws < 0.75 for p in range(1, n)), seen
    sources = Counter(src for _ in range(draws) for src in draw_probes(rng, untimed, runs).values())
    assert sources[0] / (2 * draws) < 0.8  # the first call is not the only one repeated
    assert len(sources) >= n - 2


def test_a_single_probe_may_fall_anywhere_after_the_first_call() -> None:
    rng = random.Random(3)
    seen = Counter(p for _ in range(2000) for p in draw_probes(rng, 2, 3, k=1))
    assert set(seen) == {1, 2, 3, 4, 5}
