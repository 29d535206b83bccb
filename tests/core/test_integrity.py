"""The shadowing check: files named like a module the harness imported, and only those."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy  # noqa: F401  (the harness imports it before any user code)

from nsight_core.contestant.integrity import harness_module_names, shadowing_files


def test_only_modules_the_harness_imported_are_shadowed_never_main(tmp_path: Path) -> None:
    for name in ("__main__.py", "numpy.py", "json.py", "csvkit_like.py", "mailbox.py"):
        (tmp_path / name).write_text("")
    pkg = tmp_path / "pytest"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    harness = harness_module_names()
    assert "__main__" not in harness and "numpy" in harness and "json" in harness
    assert "mailbox" not in sys.modules  # a standard module nothing here imported
    found = shadowing_files([tmp_path], harness)
    named = {line.split(" shadows ")[0].rsplit("/", 1)[-1] for line in found}
    # A package's own __main__.py (nspy_mcp has one) and look-alikes of modules nothing
    # imported are plain user files; numpy, json and pytest were imported first.
    assert named == {"numpy.py", "json.py", "pytest"}, found
