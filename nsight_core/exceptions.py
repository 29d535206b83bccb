"""Nsight Python's exception names, so ``from nsight import exceptions`` code runs unchanged.

Every class here is also a `NsightCoreError`, so it carries an `ErrorClass` and a hint
and code written against nsight_core catches it the usual way. The constructors take the
message first, as Nsight Python's do. `InvalidMetricsError` is also a `ValueError`,
which is what Nsight Python raises for unknown metric names, and `KernelCountError` a
`RuntimeError`, which it raises when an annotation's kernels do not give one value per run.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from nsight_core.errors import ErrorClass, NsightCoreError


class ProfilerException(NsightCoreError):
    """Nsight Python's general profiling error (config validation, profiler failures)."""

    def __init__(
        self,
        message: str = "",
        error_class: ErrorClass = ErrorClass.PROFILER_ERROR,
        hint: str = "",
    ) -> None:
        super().__init__(error_class, message, hint)


class NCUNotAvailableError(ProfilerException):
    """No usable ncu was found; the ``events`` backend needs none."""

    def __init__(self, message: str = "", hint: str = "") -> None:
        super().__init__(
            message or "Nsight Compute CLI (ncu) was not found on this system",
            ErrorClass.PROFILER_ERROR,
            hint or "install Nsight Compute, set NSPY_NCU, or use backend='events'",
        )


class ThermalControlError(ProfilerException):
    """The thermal guard was asked for but cannot work (no NVML, no such device)."""

    def __init__(self, message: str = "", hint: str = "") -> None:
        super().__init__(message, ErrorClass.INVALID_REQUEST, hint)


class CoolingTimeoutError(ThermalControlError):
    """Kept for Nsight Python code that catches it; nsight_core records a timed-out wait in
    the rows (`ThermalGuard == "timed_out"`) instead of aborting the call."""


class InvalidMetricsError(ProfilerException, ValueError):
    """Unknown metric names: a `ValueError` as in Nsight Python, and `invalid_metric`."""

    def __init__(self, metrics: Sequence[str], detail: str = "") -> None:
        super().__init__(
            get_metrics_error_message(metrics),
            ErrorClass.INVALID_METRIC,
            detail,
        )
        self.metrics = list(metrics)


class KernelCountError(ProfilerException, RuntimeError):
    """The kernels of an annotation cannot give one value per run: a `RuntimeError` as in
    Nsight Python, class ``kernel_count_mismatch`` (or ``no_kernels`` when nothing was
    profiled). The call's `ProfileResults` ride on it as ``err.results``."""

    def __init__(
        self,
        message: str = "",
        hint: str = "",
        error_class: ErrorClass = ErrorClass.KERNEL_COUNT_MISMATCH,
    ) -> None:
        super().__init__(message, error_class, hint)


class MetricErrorType(Enum):
    """Why a metric was refused: the name is unknown, or the chip lacks it."""

    INVALID = "invalid"
    UNSUPPORTED = "unsupported"


def get_metrics_error_message(
    metrics: Sequence[str], error_type: MetricErrorType = MetricErrorType.INVALID
) -> str:
    """The message Nsight Python gives for bad metric names (tests match its first line)."""
    word = "Invalid" if error_type is MetricErrorType.INVALID else "Unsupported"
    return (
        f"{word} value {list(metrics)} for 'metrics' parameter for nsight.analyze.kernel().\n"
        "Check the names with nsight_core.host.catalog.validate_metrics or ncu --query-metrics."
    )


__all__ = [
    "CoolingTimeoutError",
    "InvalidMetricsError",
    "KernelCountError",
    "MetricErrorType",
    "NCUNotAvailableError",
    "ProfilerException",
    "ThermalControlError",
    "get_metrics_error_message",
]
