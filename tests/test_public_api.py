"""The public surface of both packages is explicit, sorted and importable."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from nsight_core.errors import ErrorClass

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("package", ["nsight_core", "nspy_mcp"])
def test_all_is_sorted_and_every_name_resolves(package: str) -> None:
    mod = importlib.import_module(package)
    names = list(mod.__all__)
    assert names == sorted(names)
    for name in names:
        assert getattr(mod, name) is not None


def test_error_classes_are_exactly_those_of_the_design() -> None:
    assert {e.value for e in ErrorClass} == {
        "invalid_request", "invalid_metric", "import_error", "compile_error", "runtime_error",
        "incorrect", "timeout", "crashed", "kernel_count_mismatch", "no_kernels",
        "profiler_error", "permission_denied", "no_gpu", "cancelled", "out_of_memory",
    }  # fmt: skip


def test_every_error_class_is_documented() -> None:
    text = (ROOT / "docs" / "errors.md").read_text()
    missing = [e.value for e in ErrorClass if f"`{e.value}`" not in text]
    assert missing == []


def test_importing_nsight_core_imports_no_framework_or_report_reader() -> None:
    import subprocess
    import sys

    code = (
        "import sys, nsight_core; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'triton', 'cupy', 'pandas', 'numpy', 'ncu_report', 'mcp')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_every_public_name_resolves_lazily() -> None:
    """`__all__` and the lazy table agree, and each name loads (PEP 562 `__getattr__`)."""
    import nsight_core

    assert sorted(nsight_core.__all__) == sorted(nsight_core._PUBLIC)
    for name in nsight_core.__all__:
        assert getattr(nsight_core, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = nsight_core.nope
