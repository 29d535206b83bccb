"""A job process's CUDA context, made on a side thread while the process imports.

A cold job's critical path is its contestant's start: Python, the harness, numpy and torch,
then the CUDA driver and the device's primary context (under ncu the driver's start also
loads ncu's injection and connects to ncu). Imports hold the GIL; the driver's calls,
made through `ctypes.CDLL`, release it. So the job's two processes start this thread
first and import meanwhile: the driver's initialisation and the primary context, which
torch, cupy and Triton all use, are ready (or nearly) when the imports end, and torch's
own CUDA initialisation then finds the context made.

Under ncu the thread also launches the *prime*: one empty kernel of one thread, profiled
like any kernel outside the untimed ranges. ncu sets up its profiling at the first kernel it
profiles in a process, which costs that kernel's range most of a second (measured in
docs/sandbox.md); the prime moves the set-up beside the imports, off the job's path. It is
the report's first result, and `ranges.classify` leaves out only that one, and only when
the contestant said it ran the prime before any candidate existed.

Nothing here may fail a job: without a driver or a device the thread records why and
ends, and the process goes on as before (its framework reports the real error where it
matters). Standard library only, so the thread starts before any heavy import.
"""

from __future__ import annotations

import ctypes
import threading
import time

DRIVER = "libcuda.so.1"

PRIME_KERNEL = "nspy_prime"
"""The prime's name, as ncu's report gives it (`ranges.classify` looks for it)."""

_PRIME_PTX = (
    # PTX, compiled by the driver for the device at hand; sm_75, CUDA 13's oldest target.
    ".version 6.3\n.target sm_75\n.address_size 64\n"
    f".visible .entry {PRIME_KERNEL}()\n{{\n\tret;\n}}\n"
).encode() + b"\0"


class EarlyCuda:
    """The driver's initialisation and device 0's primary context, on a daemon thread.

    Device 0 is the job's GPU: a job sees only its own (CUDA_VISIBLE_DEVICES). The context
    is retained, never released: its process uses it until it ends."""

    def __init__(self, *, prime: bool = False) -> None:
        """``prime``: also launch the prime (module docstring); only under ncu."""
        self.error: str | None = None
        """Why no context was made (no driver, no device, a driver error); None once made."""
        self.seconds: float | None = None
        """How long the driver's initialisation and the context took, on the side thread."""
        self.context: int | None = None
        """The primary context's handle (a CUcontext), once made."""
        self._prime = prime
        self.primed: float | None = None
        """How long the prime took, once it ran to its end; None if it did not run."""
        self.prime_error: str | None = None
        """Why the prime did not run, when it was asked for."""
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
        if self._prime and self.context is not None:
            t0 = time.monotonic()
            try:
                _launch_prime(self.context)
                self.primed = round(time.monotonic() - t0, 4)
            except _NoContext as why:
                self.prime_error = str(why)
            except Exception as exc:  # the job runs as it would without the prime
                self.prime_error = f"{type(exc).__name__}: {exc}"

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


def _launch_prime(context: int) -> None:
    """The prime, on ``context`` (made current on this thread only), run to its end."""
    lib = ctypes.CDLL(DRIVER)
    _check(lib.cuCtxSetCurrent(ctypes.c_void_p(context)), "cuCtxSetCurrent")
    module = ctypes.c_void_p()
    _check(
        lib.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(_PRIME_PTX)), "cuModuleLoadData"
    )
    try:
        fn = ctypes.c_void_p()
        name = PRIME_KERNEL.encode()
        _check(lib.cuModuleGetFunction(ctypes.byref(fn), module, name), "cuModuleGetFunction")
        _check(lib.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, None, None, None), "cuLaunchKernel")
        _check(lib.cuCtxSynchronize(), "cuCtxSynchronize")
    finally:
        lib.cuModuleUnload(module)


def _check(rc: int, call: str) -> None:
    if rc != 0:
        raise _NoContext(f"{call} returned CUDA error {rc}")
