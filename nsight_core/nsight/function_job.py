"""The `@kernel` job: run a pickled function per (config, run) in a worker, then rows.

Shares the worker, the sandbox, extraction and aggregation with profile requests; only
the job's shape differs (the function annotates itself, there is no reference check).
`derive_metric` and `normalize_against` are applied here, per run, in the parent.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import sysconfig
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.pipeline import run_worker
from nsight_core.plan.config import EngineConfig
from nsight_core.protocol import FunctionJob, JobSpec, RunKey
from nsight_core.results import Failure, ProfileResult, iso, utc_now
from nsight_core.rows.aggregate import RunValue, RunValues, aggregate_rows, normalize_rows
from nsight_core.rows.assemble import (
    collect_values,
    diagnose_job,
    failure_of_error,
    finish_result,
    row_context,
)
from nsight_core.rows.runs import JobRun
from nsight_core.settings import JobSettings

Bound = tuple[tuple[Any, ...], dict[str, Any]]


def _by_value_modules(callables: Sequence[Callable[..., Any]]) -> list[Any]:
    """The modules the worker could not import by name: local files and packages outside
    site-packages and the standard library (``__main__`` is pickled by value anyway)."""
    installed = (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["stdlib"])
    out: list[Any] = []
    for c in callables:
        module = inspect.getmodule(c)
        path = getattr(module, "__file__", None) or ""
        if (
            module is None
            or module.__name__ == "__main__"
            or module.__name__.startswith("nsight_core.")
            or path.startswith(installed)
            or module in out
        ):
            continue
        out.append(module)
    return out


def _pickle_function(
    func: Callable[..., Any], bound: Sequence[Bound], by_value: Sequence[Callable[..., Any]] = ()
) -> bytes:
    """Pickle by value whatever the worker could not import: __main__, notebooks, local
    files. ``by_value`` names callables hidden inside ``func`` (the user's function under
    a wrapper, its info collectors) whose modules must travel too."""
    import cloudpickle  # lazy: only the caller of a @kernel function pickles

    from nsight_core.nsight import pickling  # lazy: imports cloudpickle, as above

    modules = _by_value_modules([func, *by_value])
    for m in modules:
        cloudpickle.register_pickle_by_value(m)
    try:
        return pickling.dumps((func, list(bound)), by_value=[m.__name__ for m in modules])
    finally:
        for m in modules:
            cloudpickle.unregister_pickle_by_value(m)


def _derive(
    values: RunValues,
    derive: Callable[..., Any],
    bound: Sequence[Bound],
) -> RunValues:
    """Add derived metrics, computed per run from that run's values (Nsight Python's rule).

    The measured metrics keep their rows; a derived value without a unit warns once per name.
    """
    unitless: set[str] = set()
    extra: dict[tuple[RunKey, str], RunValue] = {}
    names: list[str] = []
    base_name = getattr(derive, "__name__", "derived")
    for key in values.expected_keys:
        cells = [values.get(key, m) for m in values.metrics]
        args, kwargs = bound[key.config_id] if key.config_id < len(bound) else ((), {})
        config_values = [*args, *kwargs.values()]
        if any(c is None or c.value is None for c in cells):
            first = next((c for c in cells if c is not None and c.error_class), None)
            out: Any = {base_name: None}
            err = (first.error_class, first.error) if first else (None, None)
        else:
            out = derive(*[c.value for c in cells if c is not None], *config_values)
            err = (None, None)
        items = out.items() if isinstance(out, Mapping) else [(base_name, out)]
        for name, item in items:
            value, unit = item if isinstance(item, tuple) else (item, "")
            if name not in names:
                names.append(str(name))
            if value is not None and not unit and str(name) not in unitless:
                unitless.add(str(name))
                warnings.warn(
                    f"Derived metric {str(name)!r} does not have a unit specified: return "
                    "(value, unit) to give it one; its Unit stays empty.",
                    UserWarning,
                    stacklevel=2,
                )
            kernels = cells[0].kernels if cells and cells[0] is not None else ()
            extra[(key, str(name))] = RunValue(
                key, str(name), None if value is None else float(value), unit, kernels, (), *err
            )
    return RunValues(
        {**values.values, **extra},
        values.expected_keys,
        (*values.metrics, *names),
        values.failures,
        values.unexpected_keys,
    )


@dataclass(frozen=True)
class FunctionRun:
    """A `@kernel` job's result, and its per-run values before derive and normalize (the
    Nsight-compatible API reads the kernel counts there)."""

    result: ProfileResult
    measured: RunValues


def run_function(
    func: Callable[..., Any],
    bound: Sequence[Bound],
    *,
    params: Sequence[dict[str, Any]],
    settings: JobSettings,
    job_dir: Path,
    config: EngineConfig,
    derive_metric: Callable[..., Any] | None = None,
    normalize_against: str | None = None,
    by_value: Sequence[Callable[..., Any]] = (),
) -> FunctionRun:
    created = iso(utc_now())
    job_dir.mkdir(parents=True, exist_ok=True)
    pickle_file = job_dir / "function.pkl"
    pickle_file.write_bytes(_pickle_function(func, bound, by_value))
    job = JobSpec(
        mode="function",
        backend=settings.backend,
        function=FunctionJob(
            pickle_file=str(pickle_file),
            configs=list(params),
            runs=settings.runs,
            warmup=settings.warmup,
        ),
        workdir=os.getcwd(),
        # The combiner callable stays in this process, where the rows are built.
        settings=dataclasses.replace(settings, combine_fn=None).wire(),
    )
    run = run_worker(job, job_dir, settings, config)
    got = collect_values(run, settings)
    values, failures, gpu = got.values, got.failures, got.gpu
    measured_values = values
    expected = values.expected_keys
    measured = set(values.metrics)  # the backend's own metric names (events__..., cupti__...)
    if derive_metric is not None:
        values = _derive(values, derive_metric, bound)
    ctx = row_context(settings, list(params), gpu)
    if normalize_against is not None:
        if normalize_against not in {k.annotation for k in values.expected_keys}:
            if run.error is not None:  # the run ended early: its own error says why
                _raise_run_error(run, failures, job_dir)
            raise NsightCoreError(
                ErrorClass.INVALID_REQUEST,
                f"Annotation {normalize_against!r} not found in data.",
                "normalize_against must name an annotation the function enters",
            )
        rows = normalize_rows(values, normalize_against, ctx)
    else:
        rows = aggregate_rows(values, ctx)
    if derive_metric is not None:
        # Nsight Python's order: every measured row first, then the derived ones (stable).
        rows = sorted(rows, key=lambda r: r.Metric not in measured)
    if run.error is not None and not rows:
        _raise_run_error(run, failures, job_dir)
    if not expected and run.error is None:
        raise NsightCoreError(
            ErrorClass.NO_KERNELS,
            "the function entered no nsight_core.annotate(...) region",
            "wrap the code to profile in `with annotate('name'):`",
        )
    result = finish_result(
        run,
        settings,
        result_id=job_dir.name,
        created_at=created,
        rows=rows,
        gpu=gpu,
        failures=failures,
        status="done",
        message=f"{len(rows)} rows, {len(failures)} failures",
        error=failure_of_error(run.error) if run.error is not None else None,
        diagnosed=diagnose_job(run, settings, got.values, list(params), gpu),
    )
    return FunctionRun(result, measured_values)


def _raise_run_error(run: JobRun, failures: Sequence[Failure], job_dir: Path) -> NoReturn:
    """Raise why a function's run ended early, in its own words where it left them."""
    assert run.error is not None
    detail = next((f for f in failures if f.ErrorClass == run.error.error_class), None)
    # What the contestant itself reported before it ended (its timer would not start)
    # says more than how it exited.
    own = next((f for f in failures if f.Annotation == "<worker>"), None)
    if detail is None and own is not None:
        raise NsightCoreError(own.ErrorClass, own.Error, f"job files are in {job_dir}")
    raise NsightCoreError(
        run.error.error_class,
        detail.Error if detail else run.error.message,
        run.error.hint or f"job files are in {job_dir}",
    )
