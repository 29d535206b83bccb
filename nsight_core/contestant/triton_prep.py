"""Triton's per-process start, made on a side thread while a cold ncu job's reference runs.

A process's first Triton launch first hashes Triton's own sources and its compiler library
(the key of every cache entry, computed once per process) and imports the front-end modules
its first specialization needs; only then does it look up the kernel. None of that touches
the GPU, and the hashing runs with the GIL released (hashlib over large buffers, file
reads). A cold ncu job's contestant starts this thread once it is confined (so the thread
is confined too) and joins it before the candidates load: meanwhile the reference's calls
mostly wait on ncu and on the judge, so the thread costs a job whose candidates are not
Triton's nearly nothing, and a Triton candidate's first call no longer pays for it
(docs/sandbox.md has the measurement). Started beside the imports of torch instead, it
competed with them for the GIL and delayed torch-only jobs.

Its imports never reach a job's directory: the reference's load adds the workdir to
``sys.path`` while the thread may still import, and a look-alike there (a ``triton.py`` on a
host without Triton, a module Triton imports late) would run job code beside the reference's
timed calls. So while the thread runs, `HarnessPathOnly` resolves its top-level imports on
the path the process had when the thread was made; other threads import as usual.

Nothing here may fail a job: a Triton without these steps, or any error, is recorded and
the first launch pays as before. A host without NVIDIA's driver skips it: Triton has no GPU
to launch on there.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
import time
from collections.abc import Sequence
from types import ModuleType

from nsight_core.runtime.early_cuda import DRIVER

KEY_FUNCTIONS = (("triton.runtime.cache", "triton_key"), ("triton.compiler.compiler", "triton_key"))
"""Where Triton versions keep the hash of their own sources (3.3+ first, then 3.0-3.2); the
first that exists is called, and its result is cached by Triton for the process."""

FIRST_SPECIALIZATION_IMPORTS = ("triton.experimental.gluon",)
"""Modules Triton imports on its first specialization of a kernel's arguments (3.5+)."""


class HarnessPathOnly(importlib.abc.MetaPathFinder):
    """Top-level imports of one thread, resolved among built-in and frozen modules and on a
    fixed path, never on what ``sys.path`` holds later; a name found nowhere there fails for
    that thread. Submodules (resolved on their package's own path) and every other thread's
    imports are left to the usual finders."""

    def __init__(self, thread_id: int, path: Sequence[str]) -> None:
        self.thread_id = thread_id
        self.path = list(path)
        self.active = True

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if not self.active or path is not None or threading.get_ident() != self.thread_id:
            return None
        for finder in (importlib.machinery.BuiltinImporter, importlib.machinery.FrozenImporter):
            spec = finder.find_spec(fullname)
            if spec is not None:
                return spec
        spec = importlib.machinery.PathFinder.find_spec(fullname, self.path)
        if spec is None:
            raise ModuleNotFoundError(f"{fullname!r} is not on the harness's path", name=fullname)
        return spec


class TritonPrep:
    """Triton imported, its source key computed and its lazy front-end imported, on a daemon
    thread; nothing without a driver or Triton. Made (and joined) on the thread that imports
    the job's code: its finder goes into ``sys.meta_path`` and out again there, while no
    other thread imports."""

    def __init__(self) -> None:
        self.error: str | None = None
        """Why a step did not run (no Triton, an error); None when all that exist ran."""
        self.seconds: float | None = None
        """How long the thread took."""
        self._t0 = time.monotonic()
        self._go = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nspy triton prep", daemon=True)
        self._thread.start()
        assert self._thread.ident is not None
        # The path as it is now, before any job directory; in place before the thread imports.
        self._finder = HarnessPathOnly(self._thread.ident, sys.path)
        sys.meta_path.insert(0, self._finder)
        self._go.set()

    def _run(self) -> None:
        self._go.wait()
        try:
            self.error = prepare_triton()
        except Exception as exc:  # the process goes on without it
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self._finder.active = False
        self.seconds = round(time.monotonic() - self._t0, 4)

    def join(self) -> None:
        """Wait for the thread: before the candidates are imported and watched."""
        self._thread.join()
        if self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)


def prepare_triton() -> str | None:
    """Import Triton, compute its source key and import its first specialization's modules;
    why not, when there is no driver, no Triton, or none of the key functions."""
    try:
        ctypes.CDLL(DRIVER)  # loaded already by the early CUDA thread where there is one
    except OSError as exc:
        return f"no CUDA driver: {exc}"
    if importlib.util.find_spec("triton") is None:
        return "triton is not installed"
    importlib.import_module("triton")
    keyed = False
    for module_name, attr in KEY_FUNCTIONS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        fn = getattr(module, attr, None)
        if callable(fn):
            fn()
            keyed = True
            break
    for name in FIRST_SPECIALIZATION_IMPORTS:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
    return None if keyed else "this Triton has no source key function"
