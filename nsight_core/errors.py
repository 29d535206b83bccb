"""The one error vocabulary of nsight_core and nspy-mcp.

Every failure that reaches a user carries one `ErrorClass`. The values are a stable,
documented contract (see docs/errors.md); adding one is an API change.

Who raises what:

- request.py: ``invalid_request`` (a field is wrong before anything runs)
- catalog.py / validate_metrics: ``invalid_metric``
- probe.py / collectors: ``no_gpu``, ``permission_denied``, ``profiler_error``
- sandbox.py (the only place that reads exit codes, signals and time limits):
  ``timeout``, ``crashed``, ``cancelled``, ``out_of_memory`` and, through the worker's exit
  codes, ``import_error``, ``compile_error``, ``runtime_error``
- worker.py (inside the child, reported as events): ``import_error``, ``compile_error``,
  ``runtime_error``, ``incorrect`` per candidate
- extract.py: ``kernel_count_mismatch``, ``no_kernels``, ``profiler_error``
"""

from __future__ import annotations

from enum import IntEnum, StrEnum


class ErrorClass(StrEnum):
    """Why a job, a candidate or a row failed. Stable strings; documented in docs/errors.md."""

    INVALID_REQUEST = "invalid_request"
    """A request field is missing, malformed or inconsistent; nothing ran."""
    INVALID_METRIC = "invalid_metric"
    """A metric name is unknown to ncu for this chip, or needs a suffix."""
    IMPORT_ERROR = "import_error"
    """A callable could not be imported (missing file, module, name or dependency)."""
    COMPILE_ERROR = "compile_error"
    """Source failed to compile: a Python SyntaxError, or a JIT (Triton, NVRTC) build error."""
    RUNTIME_ERROR = "runtime_error"
    """A callable raised while running."""
    INCORRECT = "incorrect"
    """A candidate's output differs from the reference's (or it mutated, aliased or drifted)."""
    TIMEOUT = "timeout"
    """The job outlived its time limit; its whole process group was killed."""
    CRASHED = "crashed"
    """The worker died without reporting: a signal (segfault, abort) or an unexpected exit."""
    KERNEL_COUNT_MISMATCH = "kernel_count_mismatch"
    """Runs of one annotation and config launched different numbers of kernels."""
    NO_KERNELS = "no_kernels"
    """An annotation ran but no kernel was profiled inside it."""
    PROFILER_ERROR = "profiler_error"
    """ncu (or another collector) failed, or wrote no usable report."""
    PERMISSION_DENIED = "permission_denied"
    """GPU performance counters are restricted for this user (ERR_NVGPUCTRPERM), or the OS
    refused a file to a candidate (the confined contestant's allow-list)."""
    NO_GPU = "no_gpu"
    """The backend needs a GPU and none is visible."""
    CANCELLED = "cancelled"
    """The caller cancelled the job; its process group was killed."""
    OUT_OF_MEMORY = "out_of_memory"
    """The job's resident memory passed its limit (or CUDA ran out of device memory)."""


class NsightCoreError(Exception):
    """An error with a stable class, a message, and a hint that says what to change."""

    def __init__(self, error_class: ErrorClass, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.error_class = ErrorClass(error_class)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message

    def to_dict(self) -> dict[str, str]:
        return {"error_class": self.error_class.value, "message": self.message, "hint": self.hint}


class JobExit(IntEnum):
    """Exit codes of a job's processes (judge, contestant); sandbox.py maps them to ErrorClass.

    Codes sit above 64 so they do not collide with Python's own 1 (uncaught exception)
    and 2 (usage), nor with the shell's 126-128+N for signals.
    """

    OK = 0
    """All phases ran; per-candidate failures, if any, are in the events file."""
    BAD_JOB = 70
    """The job file was missing or malformed: a bug on the parent side."""
    IMPORT_FAILED = 71
    """The reference or the input maker could not be imported; nothing can be checked."""
    COMPILE_FAILED = 72
    """The reference's or input maker's source did not compile."""
    REFERENCE_FAILED = 73
    """The reference or the input maker raised; no candidate can be judged."""
    INTERNAL = 74
    """An unexpected error in the worker itself (traceback in the events file)."""


WORKER_EXIT_CLASS: dict[JobExit, ErrorClass | None] = {
    JobExit.OK: None,
    JobExit.BAD_JOB: ErrorClass.INVALID_REQUEST,
    JobExit.IMPORT_FAILED: ErrorClass.IMPORT_ERROR,
    JobExit.COMPILE_FAILED: ErrorClass.COMPILE_ERROR,
    JobExit.REFERENCE_FAILED: ErrorClass.RUNTIME_ERROR,
    JobExit.INTERNAL: ErrorClass.CRASHED,
}
