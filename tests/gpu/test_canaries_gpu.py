"""The deep check's canaries on a GPU host: one job per backend, ncu, cupti and events.

Prints one line per backend (caught/total, the control's outcome, wall time, what was
missed) for the closing note, and writes them to $NSPY_CANARY_TABLE when set. Every backend
must run here: a GPU host that cannot run one of them says why in the failure. Each
backend's total is its own (`hacks_under`: the blind job runs under events only), and on
an Ampere or newer GPU `keep_l2_persisting` counts as caught under events and cupti only
where its rows name the persisting-L2 limit the harness undid.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from nsight_core.host.probe import probe_environment
from nsight_core.plan.config import EngineConfig
from nspy_mcp.canaries import hacks_under, with_canaries

pytestmark = pytest.mark.gpu


def test_deep_check_catches_every_canary_under_ncu_cupti_and_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NSPY_CACHE_DIR", str(tmp_path / "cache"))
    report = probe_environment(EngineConfig.from_env(), deep=True, refresh=True)
    assert report.gpus, report.gpu_error
    report = with_canaries(report, EngineConfig.from_env())
    assert report.canaries is not None
    lines = []
    for name, check in report.canaries.items():
        wall = "-" if check.wall_s is None else f"{check.wall_s:.1f} s"
        lines.append(
            f"{name:<7s} {check.caught}/{check.total} caught  control: {check.control or '-'}  "
            f"{wall}  {check.note}"
        )
        lines.extend(f"        missed {m}" for m in check.missed)
    table = "\n".join(lines) + "\n"
    sys.stdout.write(table)
    if out := os.environ.get("NSPY_CANARY_TABLE"):
        Path(out).write_text(table)
    for name, check in report.canaries.items():
        assert check.ok is not None, f"{name}: {check.note}"
        hacks = hacks_under(name)
        assert (check.caught, check.total) == (hacks, hacks), (name, check.missed)
        assert check.control.startswith("passed, Trust "), (name, check.control)
        assert check.ok, (name, check.note)
