"""Whether a config's check can tell a computed answer from one that ignores the inputs
(judge/discrimination.py), and what the parent does with a config whose check cannot
(rows/blind.py)."""

from __future__ import annotations

from typing import Any

import torch

from nsight_core.judge.discrimination import BLIND_PAIRS, Discrimination
from nsight_core.judge.verdict import trivial_bound
from nsight_core.protocol import CheckEvent
from nsight_core.results import Comparison, Row
from nsight_core.rows.blind import blind_comparisons, blind_message, blind_rows

NO_INPUTS: Any = ((), {})


def _ask(outputs: list[Any], atol: float | None = None, rtol: float | None = None) -> list[str]:
    """Feed fresh expected outputs in order; the reasons given (at most one)."""
    asked = Discrimination(3, pairs=min(BLIND_PAIRS, len(outputs) - 1))
    bound = trivial_bound(outputs[0], NO_INPUTS, atol, rtol)
    said = [asked.feed(o, NO_INPUTS, atol=atol, rtol=rtol, bound=bound) for o in outputs]
    return [s for s in said if s is not None]


def _mse(seed: int, n: int = 1 << 20) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(n, generator=g), torch.randn(n, generator=g)
    return torch.nn.functional.mse_loss(a, b)


def test_a_0d_loss_of_many_iid_elements_cannot_be_told_from_its_expected_value() -> None:
    said = _ask([_mse(s) for s in range(4)], atol=1e-2, rtol=1e-5)
    assert len(said) == 1
    assert said[0].startswith("config 3's check cannot tell a computed answer")
    assert "the checks of 2 later calls" in said[0] and "not resolvable" in said[0]
    # The dtype's own tolerance tells them apart.
    assert _ask([_mse(s) for s in range(4)]) == []


def test_rows_the_inputs_structure_fixes_cannot_be_told_from_an_earlier_calls_rows() -> None:
    # Each row's mean square is set by its scale (the row's index), not by its values.
    def rows(seed: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(8, 1 << 16, generator=g) * torch.arange(1.0, 9.0)[:, None]
        return x.pow(2).mean(dim=-1)

    assert len(_ask([rows(s) for s in range(3)], atol=1e-2, rtol=5e-2)) == 1
    assert _ask([rows(s) for s in range(3)]) == []


def test_a_softmax_discriminates_and_the_first_failing_pair_ends_the_question() -> None:
    outs = [torch.softmax(torch.randn(32, 64) * 3, dim=-1) for _ in range(3)]
    asked = Discrimination(0)
    bound = trivial_bound(outs[0], NO_INPUTS, None, None)
    assert asked.feed(outs[0], NO_INPUTS, atol=None, rtol=None, bound=bound) is None
    assert asked.feed(outs[1], NO_INPUTS, atol=None, rtol=None, bound=bound) is None
    assert asked.decided and asked.first is None  # nothing kept past the answer


def test_a_loose_tolerance_the_trivial_bound_closes_is_not_blind() -> None:
    # Tiny softmax values under atol=1e-2: another call's output passes the tolerance, but
    # the trivial-answer bound asks every output to be 10x closer than the mean constant,
    # which another call's output is not: the check does discriminate, through the bound.
    outs = [torch.softmax(torch.randn(8, 4096) * 0.5, dim=-1) for _ in range(3)]
    assert _ask(outs, atol=1e-2, rtol=1e-5) == []


def test_one_agreement_by_chance_does_not_make_a_config_blind() -> None:
    # Two argmaxes agree, the third does not.
    outs = [torch.tensor(3), torch.tensor(3), torch.tensor(5)]
    assert _ask(outs) == []
    # The same answer bit for bit every time is a constant function's: a constant is right.
    assert _ask([torch.tensor(3)] * 3) == []
    assert _ask([torch.tensor(2.0), torch.tensor(2.0), torch.tensor(2.001)], atol=1e-2) != []


def test_a_small_part_of_a_larger_output_is_asked_on_its_own() -> None:
    def normalize(seed: int, scale: float, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(8, cols, generator=g) * scale
        mean = x.mean(dim=-1)
        return (x - mean[:, None]) / x.std(dim=-1, keepdim=True), mean

    said = _ask([normalize(s, 0.05, 4096) for s in range(3)], atol=1e-2, rtol=1e-5)
    assert len(said) == 1 and "output[1]" in said[0]
    assert _ask([normalize(s, 0.5, 64) for s in range(3)], atol=1e-2, rtol=1e-5) == []


def test_a_part_every_call_gives_alike_is_a_constant_not_a_blind_spot() -> None:
    mask = torch.tril(torch.ones(8, 8))
    outs = [(torch.randn(8, 8), mask.clone()) for _ in range(3)]
    assert _ask(outs) == []


def test_with_two_fresh_calls_one_pair_decides() -> None:
    assert len(_ask([_mse(0), _mse(1)], atol=1e-2, rtol=1e-5)) == 1


def _row(ann: str, cid: int) -> Row:
    return Row.model_validate(
        {
            "Annotation": ann, "ConfigId": cid, "Params": {}, "Metric": "m", "Unit": "ns",
            "AvgValue": 1.0, "MedianValue": None, "StdDev": None, "MinValue": None,
            "MaxValue": None, "NumRuns": 3, "RequestedRuns": 3, "RelativeStdDevPct": None,
            "CI95_Lower": None, "CI95_Upper": None, "StableMeasurement": None, "Kernel": None,
            "Backend": "events", "Evidence": "in_process", "Trust": "ok", "Reasons": [],
        }
    )  # fmt: skip


def _comparison(ann: str, cid: int) -> Comparison:
    return Comparison(
        Annotation=ann,
        Baseline="ref",
        ConfigId=cid,
        Params={},
        Metric="events__time",
        Ratio=0.01,
        Speedup=100.0,
        Speedup_CI95_Lower=90.0,
        Speedup_CI95_Upper=110.0,
        Resolvable=True,
        NumPairs=3,
    )


def _check(ann: str, cid: int, passed: bool, reasons: list[str]) -> CheckEvent:
    return CheckEvent(annotation=ann, config_id=cid, passed=passed, seeds=8, reasons=reasons)


def test_a_check_that_passed_with_a_reservation_makes_rows_suspicious_and_unresolvable() -> None:
    why = "config 1's check cannot tell ..."
    checks = [
        _check("cand", 0, True, []),
        _check("cand", 1, True, [why]),
        _check("other", 1, False, ["output mismatch: ..."]),  # failed: no rows to doubt
    ]
    rows = blind_rows([_row(a, c) for a in ("ref", "cand") for c in (0, 1)], checks)
    trust = {(r.Annotation, r.ConfigId): (r.Trust, r.Reasons) for r in rows}
    assert trust[("cand", 1)] == ("suspicious", [why])
    assert trust[("cand", 0)] == ("ok", []) and trust[("ref", 1)] == ("ok", [])
    comps = blind_comparisons([_comparison("cand", c) for c in (0, 1)], checks)
    assert [c.Resolvable for c in comps] == [True, None]
    assert comps[1].Reasons == [why]
    assert comps[1].Speedup == 100.0  # the number stays, for what it is worth
    assert blind_message(checks) == why
    assert blind_message(checks[:1]) == ""
