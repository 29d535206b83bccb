"""What a user does first, run the way a user runs it: a plain `pip install -e .` in a fresh
virtual environment (no torch, no test extras), from folders outside the repository, with
candidate files in folders of their own, through the real MCP client over stdio.

These journeys are marked `journey`: they build a virtual environment (about a minute), so
the README's test command leaves them out and `.ci/run` runs them from a folder outside the
repository (`python -m pytest -m journey`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

INSTALL_TIMEOUT_S = 600
RUN_TIMEOUT_S = 300


def user_env(tmp: Path) -> dict[str, str]:
    """The environment of a user's shell: none of this test run's Python settings, and a
    TMPDIR of the test's own, so what the commands leave behind goes with the test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["TMPDIR"] = str(tmp)
    return env


def run(
    argv: list[str], cwd: Path, timeout: float = RUN_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    """A user's command: its own folder, a time limit, output captured for the assertion."""
    tmp = cwd / ".tmp"
    tmp.mkdir(exist_ok=True)
    env = user_env(tmp)
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="session")
def plain_python(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The Python of a fresh venv with `pip install -e <repo>` only: no torch, no extras."""
    home = tmp_path_factory.mktemp("plain")
    venv = home / ".venv"
    made = run([sys.executable, "-m", "venv", str(venv)], home)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    pip = run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-e", str(REPO)],
        home,
        INSTALL_TIMEOUT_S,
    )
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    has_torch = run([str(python), "-c", "import torch"], home)
    assert has_torch.returncode != 0, "the plain install pulled in torch: the journey needs none"
    yield python


@pytest.fixture
def kernels_elsewhere(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """numpy kernels in a folder of their own, as an agent writes them: a reference with its
    input maker, a candidate that imports a sibling module, and a wrong candidate."""
    folder = tmp_path_factory.mktemp("agent-kernels")
    (folder / "ref.py").write_text(
        textwrap.dedent(
            """
            import numpy as np

            def softmax(x):
                e = np.exp(x - x.max(axis=-1, keepdims=True))
                return e / e.sum(axis=-1, keepdims=True)

            def make_inputs(rows=64, cols=64):
                return (np.random.rand(rows, cols).astype(np.float32),)
            """
        )
    )
    (folder / "norm.py").write_text(
        "def normalize(e):\n    return e / e.sum(axis=-1, keepdims=True)\n"
    )
    (folder / "v1.py").write_text(
        textwrap.dedent(
            """
            import numpy as np
            from norm import normalize

            def softmax(x):
                return normalize(np.exp(x - x.max(axis=-1, keepdims=True)))

            def wrong(x):
                return np.exp(x) / np.exp(x).sum(axis=0, keepdims=True)
            """
        )
    )
    return folder
