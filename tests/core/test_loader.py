"""Loading callables by spec, and the ErrorClass of every way it fails."""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path

import pytest

from nsight_core.errors import ErrorClass
from nsight_core.runtime.loader import LoadError, load_callable


def write(root: Path, rel: str, code: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(code))
    return path


def load_error(spec: str, root: Path, source: Path | None = None) -> LoadError:
    with pytest.raises(LoadError) as info:
        load_callable(spec, workdir=root, source_file=source)
    return info.value


def test_file_spec_loads_the_function_and_its_siblings_import(tmp_path: Path) -> None:
    write(tmp_path, "k/helper.py", "def twice(x):\n    return 2 * x\n")
    write(tmp_path, "k/v2.py", "from helper import twice\ndef f(x):\n    return twice(x) + 1\n")
    assert load_callable("k/v2.py:f", workdir=tmp_path, source_file=None)(3) == 7


def test_dotted_attribute_path_reaches_a_method(tmp_path: Path) -> None:
    write(tmp_path, "m.py", "class K:\n    @staticmethod\n    def run(x):\n        return -x\n")
    assert load_callable("m.py:K.run", workdir=tmp_path, source_file=None)(2) == -2


def test_module_spec_imports_from_the_workdir(tmp_path: Path) -> None:
    pkg = f"pkg_{uuid.uuid4().hex[:8]}"
    write(tmp_path, f"{pkg}/__init__.py", "")
    write(tmp_path, f"{pkg}/kern.py", "def f():\n    return 'ok'\n")
    assert load_callable(f"{pkg}.kern:f", workdir=tmp_path, source_file=None)() == "ok"


def test_bare_name_comes_from_the_inline_source(tmp_path: Path) -> None:
    src = write(tmp_path, "inline.py", "def cand():\n    return 5\n")
    assert load_callable("cand", workdir=tmp_path, source_file=src)() == 5


def test_one_file_is_executed_once_for_several_names(tmp_path: Path) -> None:
    write(tmp_path, "s.py", "N = []\nN.append(1)\ndef a():\n    return N\ndef b():\n    return N\n")
    a = load_callable("s.py:a", workdir=tmp_path, source_file=None)
    b = load_callable("s.py:b", workdir=tmp_path, source_file=None)
    assert a() is b()
    assert a() == [1]


def test_syntax_error_is_compile_error_with_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.py", "x = 1\n\ndef f(:\n    pass\n")
    err = load_error("bad.py:f", tmp_path)
    assert err.error_class == ErrorClass.COMPILE_ERROR
    assert (err.file, err.line) == (str(path.resolve()), 3)


def test_indentation_error_is_compile_error(tmp_path: Path) -> None:
    write(tmp_path, "ind.py", "def f():\nreturn 1\n")
    err = load_error("ind.py:f", tmp_path)
    assert err.error_class == ErrorClass.COMPILE_ERROR
    assert err.line == 2


def test_syntax_error_in_an_imported_sibling_points_at_the_sibling(tmp_path: Path) -> None:
    sib = f"sib_{uuid.uuid4().hex[:8]}"
    write(tmp_path, f"{sib}.py", "def g(\n")
    write(tmp_path, "top.py", f"import {sib}\ndef f():\n    pass\n")
    err = load_error("top.py:f", tmp_path)
    assert err.error_class == ErrorClass.COMPILE_ERROR
    assert err.file is not None and err.file.endswith(f"{sib}.py")


def test_missing_file_is_import_error(tmp_path: Path) -> None:
    assert load_error("nope.py:f", tmp_path).error_class == ErrorClass.IMPORT_ERROR


def test_missing_module_is_import_error(tmp_path: Path) -> None:
    err = load_error(f"missing_{uuid.uuid4().hex[:8]}.mod:f", tmp_path)
    assert err.error_class == ErrorClass.IMPORT_ERROR


def test_missing_dependency_is_import_error_at_the_importing_line(tmp_path: Path) -> None:
    write(tmp_path, "dep.py", "import os\nimport not_installed_anywhere_xyz\ndef f():\n    pass\n")
    err = load_error("dep.py:f", tmp_path)
    assert err.error_class == ErrorClass.IMPORT_ERROR
    assert err.line == 2


def test_missing_name_is_import_error(tmp_path: Path) -> None:
    write(tmp_path, "n.py", "def softmax(x):\n    return x\n")
    assert load_error("n.py:sofmax", tmp_path).error_class == ErrorClass.IMPORT_ERROR
    assert load_error("n.py:softmax.inner", tmp_path).error_class == ErrorClass.IMPORT_ERROR


def test_not_callable_is_import_error(tmp_path: Path) -> None:
    write(tmp_path, "c.py", "f = 3\n")
    assert load_error("c.py:f", tmp_path).error_class == ErrorClass.IMPORT_ERROR


def test_exception_at_import_is_runtime_error_at_its_line(tmp_path: Path) -> None:
    write(tmp_path, "r.py", "x = 1\nraise RuntimeError('no GPU here')\n")
    err = load_error("r.py:f", tmp_path)
    assert err.error_class == ErrorClass.RUNTIME_ERROR
    assert err.line == 2


def test_sys_exit_at_import_is_runtime_error(tmp_path: Path) -> None:
    write(tmp_path, "e.py", "import sys\nsys.exit(3)\n")
    assert load_error("e.py:f", tmp_path).error_class == ErrorClass.RUNTIME_ERROR


def test_bare_name_without_inline_source_is_invalid_request(tmp_path: Path) -> None:
    assert load_error("cand", tmp_path).error_class == ErrorClass.INVALID_REQUEST


def test_a_failed_file_can_be_fixed_and_loaded_again(tmp_path: Path) -> None:
    write(tmp_path, "fix.py", "def f(:\n")
    assert load_error("fix.py:f", tmp_path).error_class == ErrorClass.COMPILE_ERROR
    write(tmp_path, "fix.py", "def f():\n    return 1\n")
    assert load_callable("fix.py:f", workdir=tmp_path, source_file=None)() == 1


def test_candidate_files_are_compiled_from_source_without_a_pycache(tmp_path: Path) -> None:
    # A .pyc is keyed on mtime seconds and size: a same-size edit could run stale code.
    write(tmp_path, "fresh.py", "def f():\n    return 1\n")
    load_callable("fresh.py:f", workdir=tmp_path, source_file=None)
    assert not (tmp_path / "__pycache__").exists()
