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

Nothing here may fail a job: a Triton without these steps, or any error, is recorded and
the first launch pays as before. A host without NVIDIA's driver skips it: Triton has no GPU
to launch on there.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import threading
import time

from nsight_core.runtime.early_cuda import DRIVER

KEY_FUNCTIONS = (("triton.runtime.cache", "triton_key"), ("triton.compiler.compiler", "triton_key"))
"""Where Triton versions keep the hash of their own sources (3.3+ first, then 3.0-3.2); the
first that exists is called, and its result is cached by Triton for the process."""

FIRST_SPECIALIZATION_IMPORTS = ("triton.experimental.gluon",)
"""Modules Triton imports on its first specialization of a kernel's arguments (3.5+)."""


class TritonPrep:
    """Triton imported, its source key computed and its lazy front-end imported, on a daemon
    thread; nothing without a driver or Triton."""

    def __init__(self) -> None:
        self.error: str | None = None
        """Why a step did not run (no Triton, an error); None when all that exist ran."""
        self.seconds: float | None = None
        """How long the thread took."""
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="nspy triton prep", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.error = prepare_triton()
        except Exception as exc:  # the process goes on without it
            self.error = f"{type(exc).__name__}: {exc}"
        self.seconds = round(time.monotonic() - self._t0, 4)

    def join(self) -> None:
        """Wait for the thread: before the candidates are imported and watched."""
        self._thread.join()


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
