"""Every numbered example runs and its `main()` asserts what it shows.

An example that needs a GPU says so with a module-level ``NEEDS_GPU = True``; it is marked
`gpu` and runs only with ``pytest -m gpu`` on a GPU host.
"""

from __future__ import annotations

import importlib.util
import re
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
def test_example_main_runs_and_checks_itself(path: Path) -> None:
    module = _load(path)
    assert module.__doc__, f"{path.name} needs a docstring saying what it teaches"
    module.main()
