"""A job process's CUDA context, made on a side thread while the process imports.

A cold job's critical path is its contestant's start: Python, the harness, numpy and torch,
then the CUDA driver and the device's primary context (under ncu the driver's start also
loads ncu's injection and connects to ncu). Imports hold the GIL; the driver's calls,
made through `ctypes.CDLL`, release it. So the job's two processes start this thread
first and import meanwhile: the driver's initialisation and the primary context, which
torch, cupy and Triton all use, are ready (or nearly) when the imports end, and torch's
own CUDA initialisation then finds the context made.

Nothing here may fail a job: without a driver or a device the thread records why and
ends, and the process goes on as before (its framework reports the real error where it
matters). Standard library only, so the thread starts before any heavy import.
"""

from __future__ import annotations

import ctypes
import threading
import time

DRIVER = "libcuda.so.1"


class EarlyCuda:
    """The driver's initialisation and device 0's primary context, on a daemon thread.

    Device 0 is the job's GPU: a job sees only its own (CUDA_VISIBLE_DEVICES). The context
    is retained, never released: its process uses it until it ends."""

    def __init__(self) -> None:
        self.error: str | None = None
        """Why no context was made (no driver, no device, a driver error); None once made."""
        self.seconds: float | None = None
        """How long the driver's initialisation and the context took, on the side thread."""
        self.context: int | None = None
        """The primary context's handle (a CUcontext), once made."""
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="nspy early cuda", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.context = _retain_primary_context()
        except _NoContext as why:
            self.error = str(why)
        except Exception as exc:  # the process goes on without it
            self.error = f"{type(exc).__name__}: {exc}"
        self.seconds = round(time.monotonic() - self._t0, 4)

    def join(self) -> None:
        """Wait for the thread: before confinement (a thread made before it would not be
        confined) and before torch initialises CUDA itself."""
        self._thread.join()


class _NoContext(Exception):
    """Why the driver made no context (no driver, no device, a driver error)."""


def _retain_primary_context() -> int:
    """Device 0's primary context, made (or found) and retained."""
    try:
        lib = ctypes.CDLL(DRIVER)
    except OSError as exc:
        raise _NoContext(f"no CUDA driver: {exc}") from None
    _check(lib.cuInit(0), "cuInit")
    device = ctypes.c_int()
    _check(lib.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
    context = ctypes.c_void_p()
    _check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
    if not context.value:
        raise _NoContext("cuDevicePrimaryCtxRetain gave no context")
    return context.value


def _check(rc: int, call: str) -> None:
    if rc != 0:
        raise _NoContext(f"{call} returned CUDA error {rc}")
