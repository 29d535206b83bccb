"""What both job processes run on: their frameworks' start, the CUDA context, seeding,
failures as events, the events file, and how the process ends.

The judge (trusted) and the contestant (untrusted) share these, so they live apart from
either: the judge never imports the contestant's modules.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib
import os
import random
import sys
import traceback
from pathlib import Path
from typing import IO

from pydantic import BaseModel

from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.protocol import FailureEvent, Phase
from nsight_core.runtime.early_cuda import EarlyCuda

FRAMEWORKS = ("numpy", "torch")
"""Imported (when installed) before any code of the job, so candidates cannot shadow them.

cupy is not among them: importing it is slow under ncu (its CUDA libraries slow ncu's
context creation), and a job that uses it imports it anyway while the
reference runs (its inputs are rebuilt as cupy arrays), before any candidate exists; the
watch takes it in then (`Watch.snapshot` before the candidates are imported)."""

PRESTART_FRAMEWORKS = (*FRAMEWORKS, "triton")
"""What a pre-started process (standby.py) imports while it waits: its start-up time is off
the job's path, so Triton's slow import is taken there too."""


def preload_frameworks(names: tuple[str, ...] = FRAMEWORKS) -> None:
    for name in names:
        with contextlib.suppress(Exception):
            importlib.import_module(name)


def init_cuda(early: EarlyCuda | None = None) -> None:
    """Initialise the CUDA driver now, before confinement: its first initialisation opens
    files no allow-list can name in advance (error 304 under Landlock), while
    contexts made after it work confined. With torch, also create the context now, before any
    candidate is imported and while the other process of the job is still starting, so no
    call pays for it. Without torch (a cupy-only job) the driver alone is initialised.

    ``early``: the side thread that began the driver and the primary context while this
    process imported (early_cuda.py); joined first, so torch finds the context made."""
    if early is not None:
        early.join()
    if early is None or early.error is not None:  # the thread's cuInit did not happen or failed
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libcuda.so.1").cuInit(0)
    torch = sys.modules.get("torch")
    if torch is None:
        return
    with contextlib.suppress(Exception):
        if torch.cuda.is_available():
            torch.empty(1, device="cuda")


def exit_now(code: int) -> None:
    """End this process now, its output flushed: nothing left in it needs a normal exit."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def exit_native(code: int, *, python_atexit: bool = False) -> None:
    """End this process through C's ``exit``: C atexit handlers and library destructors run
    (ncu's injected library finishes its report there), Python's finalization does not
    (module teardown with torch loaded is a large part of ncu's end). The GIL stays held
    (`ctypes.PyDLL`), so no other Python thread runs while the libraries end; torch's
    autograd threads are not waited for, so an exit after a CUDA backward pass is no slower
    than a normal one. ``python_atexit`` runs Python's atexit callbacks first."""
    if python_atexit:
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    ctypes.PyDLL(None).exit(code)
    os._exit(code)  # not reached


def seed_all(seed: int) -> None:
    """Seed every RNG a function may use; frameworks only if already imported."""
    random.seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed % (2**32))
    torch = sys.modules.get("torch")
    if torch is not None:
        if torch.cuda.is_initialized() or not torch.cuda.is_available():
            # What torch.manual_seed does, without queueing a lazy call (with a formatted
            # stack, 0.2 ms each) for every device backend that is not up: on a CPU host
            # that was 0.6 ms of every call the judge makes.
            torch.random.default_generator.manual_seed(seed)
            if torch.cuda.is_initialized():
                torch.cuda.manual_seed_all(seed)
        else:
            torch.manual_seed(seed)  # CUDA comes up later: it gets the seed when it does
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        with contextlib.suppress(Exception):
            cupy.random.seed(seed % (2**32))


def classify_exception(exc: BaseException) -> ErrorClass:
    """Compile errors of JITs (Triton, NVRTC via cupy) differ from run-time failures."""
    if isinstance(exc, SyntaxError):
        return ErrorClass.COMPILE_ERROR
    if isinstance(exc, PermissionError):  # the confinement's allow-list, not a code bug
        return ErrorClass.PERMISSION_DENIED
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(exc, torch.cuda.OutOfMemoryError):
        return ErrorClass.OUT_OF_MEMORY
    text = str(exc)
    if "out of memory" in text.lower() or "CUDA_ERROR_OUT_OF_MEMORY" in text:
        return ErrorClass.OUT_OF_MEMORY
    for cls in type(exc).__mro__:
        name = cls.__name__
        if "Compil" in name or name in {"CompileException", "NVRTCError"}:
            return ErrorClass.COMPILE_ERROR
    return ErrorClass.RUNTIME_ERROR


def failure_event(
    annotation: str,
    phase: Phase,
    exc: BaseException,
    *,
    config_id: int | None = None,
    run: int | None = None,
) -> FailureEvent:
    if isinstance(exc, NsightCoreError):
        error_class, message = exc.error_class, str(exc)
    else:
        error_class, message = classify_exception(exc), f"{type(exc).__name__}: {exc}"
    file = getattr(exc, "filename", None) or getattr(exc, "file", None)
    line = getattr(exc, "lineno", None) or getattr(exc, "line", None)
    tb = "".join(traceback.format_exception(exc))
    return FailureEvent(
        annotation=annotation,
        config_id=config_id,
        run=run,
        phase=phase,
        error_class=error_class,
        message=message[:4000],
        traceback=tb[-6000:],
        file=str(file) if isinstance(file, str | Path) else None,
        line=line if isinstance(line, int) else None,
    )


class EventWriter:
    """Appends one JSON line per event and flushes, so a crash loses at most the last line."""

    def __init__(self, path: Path) -> None:
        self._fh: IO[str] = path.open("a", buffering=1, encoding="utf-8")

    def emit(self, event: BaseModel) -> None:
        self._fh.write(event.model_dump_json() + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
