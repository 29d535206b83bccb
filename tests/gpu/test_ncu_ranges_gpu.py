"""Work outside the timed ranges and forged ranges under ncu, on a GPU (issue 26, classes 3
and 4): the catalogue's hacks for them are named in their rows' Reasons, the reference's
rows keep exactly its own kernels, and the honest controls beside them stay trusted.

Each hack gets a job of its own (its stray kernels would make the rows of the calls around
them suspicious too); the controls share one. The same files run on CPU in tests/hacks,
where ranges mean nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nsight_core.results import ProfileResult
from tests.hacks.test_hacks import HEADERS, profile

REFERENCE = "_reference.py:softmax"
HACKS = {
    "end_range_early": "ran outside the harness's timed ranges",
    "forge_reference_ranges": "the harness did not open",
    "busy_reference_range": "ran outside the harness's timed ranges",
    "prime_impostor": "ran outside the harness's timed ranges",
}
CONTROLS = ["legit_own_nvtx_ranges", "legit_cuda_graph", "legit_multi_kernel", "legit_side_thread"]
FINDINGS = ("harness's timed ranges", "the harness did not open")


def _spec(name: str) -> str:
    return next(h.spec for h in HEADERS if h.name == name)


def _job(
    name: str, specs: list[str], tmp: pytest.TempPathFactory, *, may_fail: bool = False
) -> ProfileResult:
    cfg = {"rows": 32, "cols": 64, "device": "cuda"}
    result = profile(specs, Path(tmp.mktemp(name)), backend="ncu", config=cfg)
    assert result.status == "done" or may_fail, result.message
    return result


def _reference_is_untouched(result: ProfileResult) -> None:
    ref = [r for r in result.rows if r.Annotation == REFERENCE]
    assert ref and all(r.Trust in ("ok", "noisy") for r in ref), [(r.Trust, r.Reasons) for r in ref]
    kernels = {k for r in ref for k in r.Kernels}
    assert kernels and all("softmax" in k.lower() for k in kernels), kernels


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(HACKS))
def test_work_outside_the_ranges_and_forged_ranges_are_named(
    name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    result = _job(name, [_spec(name)], tmp_path_factory, may_fail=True)
    rows = [r for r in result.rows if r.Annotation == _spec(name)]
    if result.status == "failed":  # its kernels outside its ranges broke its counts
        errors = " | ".join(f.Error for f in result.failures if f.Annotation == _spec(name))
        assert HACKS[name] in errors, result.message
    else:
        assert rows, result.message
        assert all(r.Trust in ("suspicious", "failed") for r in rows), [
            (r.Trust, r.Reasons) for r in rows
        ]
        reasons = " | ".join(x for r in rows for x in r.Reasons)
        assert HACKS[name] in reasons, reasons
    _reference_is_untouched(result)


@pytest.mark.gpu
def test_honest_controls_stay_trusted_under_ncu(tmp_path_factory: pytest.TempPathFactory) -> None:
    result = _job("controls", [_spec(n) for n in CONTROLS], tmp_path_factory)
    for name in CONTROLS:
        rows = [r for r in result.rows if r.Annotation == _spec(name)]
        assert rows, f"{name}: {result.message}"
        assert all(r.Trust in ("ok", "noisy") for r in rows), (name, [r.Reasons for r in rows])
        assert not any(f in x for r in rows for x in r.Reasons for f in FINDINGS), name
    _reference_is_untouched(result)
