"""Turn a callable spec into the callable: runs only inside the worker child.

Spec forms (callable_spec.py, resolved once by the job's plan): ``path/file.py:name`` (relative to the
workdir; the file's directory becomes importable so siblings import), ``package.module:name``
(imported with the workdir first on ``sys.path``), and a bare ``name`` from the inline
source file. The name may be a dotted attribute path (``Model.forward``). A KernelBench model class, a
KernelBench input maker and a GPU MODE task's input maker come back wrapped so that they
run as their formats define (formats.py).

How failures map to `ErrorClass` (every one a `LoadError` carrying ``file`` and ``line``
where they are known):

- a SyntaxError anywhere in the import (the file, or a module it imports): ``compile_error``;
- a missing file, module or attribute, a dependency that does not import, or a spec that
  names something not callable: ``import_error``;
- a PermissionError (the confined contestant reached outside its allow-list):
  ``permission_denied``, with the allow-list as the fix;
- any other exception raised while the module body runs: ``runtime_error``. The module was
  found and compiled; its own code failed, so the fix lies in that code, not in the spec.

A file is executed once per worker: loading two names from one file gives one module.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.machinery
import importlib.util
import itertools
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any

from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.runtime import formats
from nsight_core.runtime.callable_spec import ResolvedSpec, resolve_spec

CONFINED_HINT = (
    "a job's processes may read only the workdir, the folders of the files the request "
    "names, the Python installation and system folders (docs/sandbox.md); put the file "
    "there, or name it in the request"
)
"""What to change when the OS refused a file: the confined contestant's allow-list is the
usual cause, and the code itself is not wrong."""

_file_modules: dict[Path, ModuleType] = {}
_names = itertools.count()


class _FreshSourceLoader(importlib.machinery.SourceFileLoader):
    """Compiles from source every time, never through ``__pycache__``.

    A .pyc is trusted when the source's mtime (in seconds) and size match, so an agent's
    same-size edit within one second would otherwise run the old code.
    """

    def get_code(self, fullname: str) -> CodeType:
        return self.source_to_code(self.get_data(self.path), self.path)


class LoadError(NsightCoreError):
    """A callable could not be loaded; ``file``/``line`` point at the cause when known."""

    def __init__(
        self,
        error_class: ErrorClass,
        message: str,
        hint: str = "",
        *,
        file: str | None = None,
        line: int | None = None,
    ) -> None:
        super().__init__(error_class, message, hint)
        self.file = file
        self.line = line


def load_callable(
    named: str | ResolvedSpec, *, workdir: Path, source_file: Path | None
) -> Callable[..., Any]:
    """The callable that ``named`` names (a job passes its plan's `ResolvedSpec`; a bare
    spec is resolved here); raises `LoadError` saying what to change."""
    try:
        resolved = named if isinstance(named, ResolvedSpec) else resolve_spec(named, workdir)
    except ValueError as exc:
        raise LoadError(ErrorClass.INVALID_REQUEST, str(exc)) from exc
    spec, attr, module_name = resolved.spec, resolved.attr, resolved.module
    if resolved.path is not None:
        module, display = _load_file(Path(resolved.path), spec), f"file {resolved.file}"
    elif module_name is not None:
        module, display = _import_module(module_name, workdir, spec), f"module {module_name}"
    else:
        if source_file is None:
            raise LoadError(
                ErrorClass.INVALID_REQUEST,
                f"{spec!r} is a bare name but the job has no inline source",
                "pass `source`, or name the callable as 'file.py:name' or 'module:name'",
            )
        module, display = _load_file(source_file, spec), "the inline source"
    target = formats.adapt(_resolve(module, attr, spec, display), module, attr)
    if not callable(target):
        raise LoadError(
            ErrorClass.IMPORT_ERROR,
            f"{spec!r} is a {type(target).__name__}, not a callable",
            "name a function (or an object with __call__)",
        )
    return target


def _load_file(path: Path, spec: str) -> ModuleType:
    path = path.resolve()
    cached = _file_modules.get(path)
    if cached is not None:
        return cached
    if not path.is_file():
        raise LoadError(
            ErrorClass.IMPORT_ERROR,
            f"{spec!r}: file {str(path)!r} does not exist",
            "file paths are relative to the request's workdir",
        )
    # A unique name: two candidates both called v2.py in different folders must not collide,
    # and nothing a candidate imports by its plain name is shadowed.
    name = f"nspy_user_{next(_names)}_{path.stem}"
    loader = _FreshSourceLoader(name, str(path))
    module_spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    if module_spec is None or module_spec.loader is None:
        raise LoadError(ErrorClass.IMPORT_ERROR, f"{spec!r}: cannot load {str(path)!r}")
    module = importlib.util.module_from_spec(module_spec)
    parent = str(path.parent)
    if parent not in sys.path:
        # Last, not first: a `torch.py` beside a candidate must not shadow the real module.
        sys.path.append(parent)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException as exc:
        del sys.modules[name]
        raise _module_error(exc, spec, str(path)) from exc
    _file_modules[path] = module
    return module


def _import_module(module_name: str, workdir: Path, spec: str) -> ModuleType:
    root = str(workdir.resolve())
    if root not in sys.path:
        sys.path.append(root)  # last: installed modules win over look-alikes in the workdir
    try:
        return importlib.import_module(module_name)
    except BaseException as exc:
        raise _module_error(exc, spec, module_name) from exc


def _module_error(exc: BaseException, spec: str, where: str) -> LoadError:
    """Classify an exception raised while importing ``where`` (see the module docstring)."""
    if isinstance(exc, KeyboardInterrupt):
        raise exc
    if isinstance(exc, SyntaxError):
        line = exc.lineno
        at = f"{exc.filename}:{line}" if line else str(exc.filename)
        return LoadError(
            ErrorClass.COMPILE_ERROR,
            f"{spec!r}: {type(exc).__name__} at {at}: {exc.msg}",
            "fix the code at that line",
            file=exc.filename,
            line=line,
        )
    if isinstance(exc, ModuleNotFoundError):
        missing = exc.name or "?"
        if where == missing or where.startswith(missing + "."):
            message = f"{spec!r}: no module named {missing!r} (searched the workdir and sys.path)"
            hint = "check the module path, or name a file as 'path/file.py:name'"
        else:
            message = f"{spec!r}: importing it needs module {missing!r}, which is not installed"
            hint = f"install {missing!r} in the worker's environment, or drop the import"
        file, line = _user_frame(exc, where)
        return LoadError(ErrorClass.IMPORT_ERROR, message, hint, file=file, line=line)
    file, line = _user_frame(exc, where)
    if isinstance(exc, ImportError):
        return LoadError(
            ErrorClass.IMPORT_ERROR,
            f"{spec!r}: {type(exc).__name__}: {exc}",
            "fix the import the message names",
            file=file,
            line=line,
        )
    if isinstance(exc, PermissionError):
        return LoadError(
            ErrorClass.PERMISSION_DENIED,
            f"{spec!r}: access refused while the module was imported: {exc}",
            CONFINED_HINT,
            file=file,
            line=line,
        )
    return LoadError(
        ErrorClass.RUNTIME_ERROR,
        f"{spec!r}: the module raised while it was imported: {type(exc).__name__}: {exc}",
        "fix the module-level code at the file and line given",
        file=file,
        line=line,
    )


def _user_frame(exc: BaseException, where: str) -> tuple[str | None, int | None]:
    """File and line of the innermost frame outside the import machinery and this module."""
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if "<frozen importlib" not in f.filename and f.filename != __file__
    ]
    if not frames:
        return (where if where.endswith(".py") else None), None
    return frames[-1].filename, frames[-1].lineno


def _resolve(module: ModuleType, attr: str, spec: str, display: str) -> object:
    target: object = module
    walked: list[str] = []
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            names = [n for n in dir(target) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=3)
            hint = f"did you mean {', '.join(map(repr, close))}?" if close else ""
            if not hint and names:
                hint = f"it defines: {', '.join(sorted(names)[:20])}"
            raise LoadError(
                ErrorClass.IMPORT_ERROR,
                f"{spec!r}: {display} has no attribute {'.'.join([*walked, part])!r}",
                hint,
                file=getattr(module, "__file__", None),
            ) from exc
        walked.append(part)
    return target
