"""The GPU plan (tools/gpu_verify.sh) names files that exist and a branch for every step.

A GPU session is short and lent rarely: a step whose test or tool was renamed on a CPU
host would only fail there, after the machine's start. This reads the script as text and
lets bash check its syntax; it runs nothing of the plan.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLAN = ROOT / "tools" / "gpu_verify.sh"


def test_the_gpu_plan_names_files_that_exist_and_handles_every_step() -> None:
    text = PLAN.read_text()
    named = set(re.findall(r"\b((?:tests|tools)/[\w/.-]+\.(?:py|sh))\b", text))
    assert named, "the plan names no test or tool"
    missing = sorted(n for n in named if not (ROOT / n).is_file())
    assert missing == []
    steps = re.search(r"^ALL=\(([^)]*)\)", text, re.M)
    assert steps is not None
    branches = set(re.findall(r"^\s+([\w-]+)\)", text, re.M))
    assert set(steps.group(1).split()) <= branches


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_gpu_plan_is_valid_bash() -> None:
    for script in (PLAN, ROOT / "tools" / "gpu_check.sh"):
        done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
