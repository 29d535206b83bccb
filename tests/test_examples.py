"""Every numbered example runs and its `main()` asserts what it shows.

An example that needs a GPU says so with a module-level ``NEEDS_GPU = True``; it is marked
`gpu` and runs only with ``pytest -m gpu`` on a GPU host. On a host that cannot run it, the
same example run as a script must say so plainly and exit non-zero (`examples/gpu_required.py`),
which the CPU tests check with real subprocesses.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _examples() -> list[object]:
    params: list[object] = []
    for path in sorted(EXAMPLES.glob("[0-9][0-9]_*.py")):
        needs_gpu = re.search(r"^NEEDS_GPU\s*=\s*True", path.read_text(), re.MULTILINE)
        marks = [pytest.mark.gpu] if needs_gpu else []
        params.append(pytest.param(path, marks=marks, id=path.stem))
    return params


def _load(path: Path) -> ModuleType:
    if str(EXAMPLES) not in sys.path:  # as when run as a script: its helpers sit next to it
        sys.path.insert(0, str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(f"example_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cpu_examples_are_all_there() -> None:
    names = {p.name for p in EXAMPLES.glob("[0-9][0-9]_*.py")}
    assert {
        "00_check_environment.py",
        "01_profile_softmax_events.py",
        "03_mcp_client_stdio.py",
    } <= names


@pytest.mark.parametrize("path", _examples())
@pytest.mark.usefixtures("own_tempdir")  # an example's files go where a user's would: TMPDIR
def test_example_main_runs_and_checks_itself(path: Path) -> None:
    module = _load(path)
    assert module.__doc__, f"{path.name} needs a docstring saying what it teaches"
    module.main()


GPU_EXAMPLES = [
    p
    for p in sorted(EXAMPLES.glob("[0-9][0-9]_*.py"))
    if re.search(r"^NEEDS_GPU\s*=\s*True", p.read_text(), re.MULTILINE)
]


@pytest.mark.parametrize("path", GPU_EXAMPLES, ids=[p.stem for p in GPU_EXAMPLES])
def test_gpu_example_without_a_gpu_says_so_plainly_and_exits_non_zero(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NSPY_CACHE_DIR", str(tmp_path / "cache"))
    guard = _load(EXAMPLES / "gpu_required.py")
    if not guard.missing(triton="triton=True" in path.read_text()):
        pytest.skip("this host can run it: the gpu-marked test does")
    p = subprocess.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
        check=False,
    )
    assert p.returncode == guard.EXIT_CODE != 0
    assert p.stderr.startswith(f"{path.name} needs a CUDA GPU"), p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""
    instead = re.search(r"Without a GPU, run (examples/\S+\.py)", p.stderr)
    assert instead, p.stderr
    alternative = EXAMPLES.parent / instead[1]
    assert alternative.is_file()
    assert "NEEDS_GPU = True" not in alternative.read_text()
