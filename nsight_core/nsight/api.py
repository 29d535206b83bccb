"""The Nsight-Python-style API: ``@kernel`` and `annotate`, backed by a fresh worker under ncu.

The decorated function is serialized by value (cloudpickle) and run in a new process that
we start under ncu, so it works from a notebook, never re-runs the caller's script, and does
not care whether the caller already initialized CUDA. Parameter names and defaults follow
Nsight Python where they are sound; docs/compat.md lists where we differ and why.

Size: about 700 lines: it is the whole Nsight-Python-compatible `@kernel` surface (argument
checks with Nsight's messages, files, thermal guard wiring, dataframes); the engine work
itself is in function_job.py.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import secrets
import shutil
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from enum import IntEnum
from pathlib import Path
from typing import Any, overload

from nsight_core.collectors import get_backend
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.exceptions import (
    InvalidMetricsError,
    NCUNotAvailableError,
    ProfilerException,
    ThermalControlError,
)
from nsight_core.host.catalog import validate_metrics
from nsight_core.host.thermal import (
    ThermalSettings,
    guarded_call,
    nvml_reader,
    read_log,
    summarize,
)
from nsight_core.nsight.function_job import run_function
from nsight_core.request import (
    CACHE_CONTROLS,
    CLOCK_CONTROLS,
    DEFAULT_METRIC,
    REDUCERS,
    REPLAY_MODES,
    RUNNABLE_BACKENDS,
    KernelsSpec,
    Reducer,
)
from nsight_core.results import Failure, ProfileResult, Row
from nsight_core.settings import JobSettings

_CHOICES: dict[str, tuple[str, ...]] = {
    "clock_control": CLOCK_CONTROLS,
    "cache_control": CACHE_CONTROLS,
    "replay_mode": REPLAY_MODES,
    "backend": RUNNABLE_BACKENDS,
}


_THERMAL_MODES = ("auto", "manual", "off")


class VerbosityLevel(IntEnum):
    """Nsight Python's verbosity levels. nsight_core never prints to stdout (it may be an MCP
    channel): INFO writes one summary line per call to stderr, DEBUG adds the profiler
    command and the job directory, SILENT writes nothing."""

    SILENT = 0
    INFO = 3
    DEBUG = 4


class ProfileResults:
    """What a ``@kernel`` call returns: rows, failures, raw values and the job's files."""

    def __init__(
        self,
        result: ProfileResult,
        param_names: Sequence[str],
        configs: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        self.result = result
        self._param_names = list(param_names)
        self._configs = [dict(c) for c in configs] if configs is not None else None

    @property
    def rows(self) -> list[Row]:
        return list(self.result.rows)

    @property
    def failures(self) -> list[Failure]:
        return list(self.result.failures)

    @property
    def artifacts(self) -> dict[str, str]:
        return dict(self.result.artifacts)

    def params_of(self, row: Row) -> dict[str, Any]:
        """The config's arguments as given (tuples stay tuples), else the row's JSON form."""
        if self._configs is not None and 0 <= row.ConfigId < len(self._configs):
            config = self._configs[row.ConfigId]
            return {k: config.get(k) for k in self._param_names}
        return {k: row.Params.get(k) for k in self._param_names}

    def to_dataframe(self) -> Any:
        """One row per (annotation, config, metric); config parameters as columns.

        Columns: Annotation, <params...>, Metric, Unit, AvgValue, MedianValue, StdDev,
        MinValue, MaxValue, NumRuns, RequestedRuns, RelativeStdDevPct, CI95_Lower,
        CI95_Upper, StableMeasurement, Kernel, GPU, Backend, CacheControl, ClockControl,
        ReplayMode, Normalized, Trust, Reasons, ErrorClass, Error, ThermalGuard,
        ThermalWaitS, GpuTempC, ThrottleReasons. Parameter values are the objects the
        function was called with. Missing values are NaN and Trust/ErrorClass/Error say why.
        """
        import pandas as pd

        records = []
        for row in self.result.rows:
            d = row.model_dump(exclude={"RawValues", "Params", "Kernels", "IgnoredKernels"})
            records.append({"Annotation": d.pop("Annotation"), **self.params_of(row), **d})
        return pd.DataFrame.from_records(records)

    def raw_dataframe(self) -> Any:
        """One row per (annotation, config, run, metric): the values the statistics used."""
        import pandas as pd

        records = [
            {
                "Annotation": r.Annotation,
                **self.params_of(r),
                "Metric": r.Metric,
                "Run": i,
                "Value": v,
                "Unit": r.Unit,
                "Kernel": r.Kernel,
                "GPU": r.GPU,
            }
            for r in self.result.rows
            for i, v in enumerate(r.RawValues)
        ]
        return pd.DataFrame.from_records(records)


def _check_choice(name: str, value: str) -> str:
    allowed = _CHOICES[name]
    if value not in allowed:
        raise ValueError(
            f"Invalid {name} {value!r}. Expected {' or '.join(repr(a) for a in allowed)}."
        )
    return value


Combine = str | Mapping[str, str] | Callable[[float, float], float] | None
"""`combine_kernel_metrics`: a reducer name, a dict metric -> name, or (Nsight Python's
form) a binary callable folded over the kernels of a call for every metric."""


def _reducers(combine: Combine) -> Reducer | dict[str, Reducer]:
    if combine is None or callable(combine):
        return "none"  # a callable travels apart, in JobSettings.combine_fn
    names = [combine] if isinstance(combine, str) else list(combine.values())
    for n in names:
        if n not in REDUCERS:
            raise ValueError(f"Invalid reducer {n!r}. Expected one of {', '.join(REDUCERS)}.")
    if isinstance(combine, str):
        return combine  # type: ignore[return-value]
    return dict(combine)  # type: ignore[arg-type]


def _thermal_settings(
    mode: str,
    wait: float | None,
    cont: float | None,
    timeout: float | None,
    device: int | None,
    time_limit_s: float,
) -> ThermalSettings:
    """Validate Nsight Python's thermal_* parameters (it checks only cont > wait)."""
    if mode not in _THERMAL_MODES:
        raise ValueError(
            f"Invalid thermal_mode {mode!r}. Expected {' or '.join(map(repr, _THERMAL_MODES))}."
        )
    base = ThermalSettings()
    w = base.wait_c if wait is None else float(wait)
    c = base.cont_c if cont is None else float(cont)
    if c <= w:
        raise ValueError(
            f"Invalid thermal control parameters: thermal_cont ({c:g}°C) must be greater "
            f"than thermal_wait ({w:g}°C), so that a paused run resumes only once the GPU "
            "has cooled past the pause point."
        )
    t = base.timeout_s if timeout is None else float(timeout)
    if t <= 0:
        raise ValueError(f"thermal_timeout must be positive, got {timeout!r}")
    if device is not None and (not isinstance(device, int) or device < 0):
        raise ValueError(f"thermal_device must be a CUDA ordinal (int >= 0), got {device!r}")
    # Half the worker's time limit at most goes to cooling, so the job is not killed for it.
    return ThermalSettings(
        mode=mode,  # type: ignore[arg-type]
        wait_c=w,
        cont_c=c,
        timeout_s=t,
        budget_s=min(max(t, 1.0) * 3, time_limit_s / 2),
        device=device,
    )


def _listed(configs: Iterable[Any]) -> list[Any]:
    if isinstance(configs, str | bytes) or not isinstance(configs, Iterable):
        raise ProfilerException(
            f"configs must be an iterable, got {type(configs)}", ErrorClass.INVALID_REQUEST
        )
    items = list(configs)
    if not items:
        raise ProfilerException("configs cannot be empty", ErrorClass.INVALID_REQUEST)
    return items


def sanitize_configs(
    func: Callable[..., Any], configs: Iterable[Any] | None
) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Bind each config to the function's signature, as Nsight Python does.

    A config is a tuple/list of positional values; a bare (non-tuple, non-list) value is a
    one-value config, allowed for a function with one parameter. So ``(2048, 512)`` for a
    one-parameter function is two values (an error), and a tuple argument is written
    ``((2048, 512),)``. Short configs are padded with defaults; keyword-only parameters are
    passed by keyword. Errors are `ProfilerException` (``invalid_request``) with Nsight
    Python's messages.
    """
    sig = inspect.signature(func)
    params = [p for p in sig.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    required = [p for p in params if p.default is p.empty]

    def bad(message: str, hint: str = "") -> ProfilerException:
        return ProfilerException(message, ErrorClass.INVALID_REQUEST, hint)

    if configs is None:
        if required:
            raise bad(
                "You have provided no configs. Provide configs at decoration time or at runtime."
            )
        return [((), {})]
    items = _listed(configs)
    if len(params) == 1:
        items = [c if isinstance(c, tuple | list) else (c,) for c in items]
    if not all(isinstance(c, tuple | list) for c in items):
        raise bad(
            "each config must be a tuple of arguments (a bare value only for one-parameter functions)"
        )
    lengths = [len(c) for c in items]
    if len(set(lengths)) > 1:
        raise bad(f"All configs must have the same number of arguments. Found lengths: {lengths}")
    n = lengths[0]
    if not len(required) <= n <= len(params):
        expects = (
            str(len(params))
            if len(required) == len(params)
            else f"between {len(required)} and {len(params)}"
        )
        hint = (
            "a tuple argument of a one-parameter function is written ((a, b),)"
            if len(params) == 1
            else ""
        )
        raise bad(f"Configs have {n} arguments, but function expects {expects}", hint)
    return [_bind(params, c) for c in items]


def _bind(
    params: Sequence[inspect.Parameter], config: Sequence[Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Positional values padded with defaults; keyword-only parameters go by keyword."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for i, p in enumerate(params):
        value = config[i] if i < len(config) else p.default
        if p.kind == p.KEYWORD_ONLY:
            kwargs[p.name] = value
        else:
            args.append(value)
    return tuple(args), kwargs


def _arguments_of(
    func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The config as name -> the object passed (what the dataframe shows)."""
    names = [
        p.name
        for p in inspect.signature(func).parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    return dict(zip(names, args, strict=False)) | kwargs


def _jsonable(v: Any) -> Any:
    if isinstance(v, int | float | str | bool | type(None)):
        return v
    if isinstance(v, tuple | list) and all(
        isinstance(x, int | float | str | bool | type(None)) for x in v
    ):
        return list(v)
    return repr(v)


def _params_of(
    func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The config in JSON form for `Row.Params`: tuples of scalars as lists, others as repr."""
    return {k: _jsonable(v) for k, v in _arguments_of(func, args, kwargs).items()}


def _check_derive(derive: Callable[..., Any], n_metrics: int, n_config: int) -> None:
    """Nsight Python's rule: ``derive(*metric_values, *config_values)``, checked before running."""
    try:
        params = list(inspect.signature(derive).parameters.values())
    except (TypeError, ValueError):
        return  # builtins without a signature: let the call tell
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    want = n_metrics + n_config
    if not len(required) <= want <= len(positional):
        raise ValueError(
            f"derive_metric expects {want} parameters ({n_metrics} metric values + "
            f"{n_config} configs), but has {len(positional)} parameters"
        )


def _register_by_value(func: Callable[..., Any]) -> Callable[[], None]:
    """Pickle the function's own module by value (as run_function does for a bare function),
    since the thermal wrapper hides it; returns the undo."""
    import cloudpickle

    module = inspect.getmodule(func)
    paths = sysconfig.get_paths()
    path = getattr(module, "__file__", None) or ""
    if (
        module is None
        or module.__name__ in ("__main__", "nsight_core.nsight.api")
        or path.startswith((paths["purelib"], paths["stdlib"]))
    ):
        return lambda: None
    cloudpickle.register_pickle_by_value(module)
    return lambda: cloudpickle.unregister_pickle_by_value(module)


def _nsight_error(err: NsightCoreError, metrics: Sequence[str]) -> NsightCoreError:
    """The same failure under Nsight Python's exception names."""
    if isinstance(err, ProfilerException):
        return err
    if err.error_class is ErrorClass.INVALID_METRIC:
        bad = [m for m in metrics if m in err.message] or list(metrics)
        return InvalidMetricsError(bad, err.message)
    if (
        err.error_class is ErrorClass.PROFILER_ERROR
        and "ncu" in err.message
        and ("not found" in err.message)
    ):
        return NCUNotAvailableError(err.message, err.hint)
    return ProfilerException(err.message, err.error_class, err.hint)


def _precheck_metrics(metrics: Sequence[str]) -> None:
    """Refuse names the shipped catalogs know to be wrong before starting ncu."""
    try:
        report = validate_metrics(list(metrics), source="shipped")
    except Exception:  # no catalog for this chip: ncu and the report check decide
        return
    bad = [m for m in report.metrics if m.status in ("unknown", "needs_suffix")]
    if bad:
        detail = "; ".join(
            f"{m.name}: {m.status}"
            + (f" (did you mean {', '.join((m.suggestions or m.valid_names)[:3])}?)"
               if (m.suggestions or m.valid_names) else "")
            for m in bad
        )  # fmt: skip
        raise InvalidMetricsError([m.name for m in bad], detail)


def _check_counts(runs: int, warmup: int) -> None:
    if not isinstance(runs, int) or isinstance(runs, bool) or runs < 1:
        raise ValueError(f"runs must be a positive integer, got {runs!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be a non-negative integer, got {warmup!r}")


def _metric_list(metrics: Sequence[str] | str) -> list[str]:
    if not isinstance(metrics, str | Sequence) or not all(isinstance(m, str) for m in metrics):
        raise InvalidMetricsError([str(metrics)], "metrics must be a list of metric names")
    names = [m.strip() for m in ([metrics] if isinstance(metrics, str) else metrics)]
    if not names or not all(names):
        raise InvalidMetricsError(names, "metrics must name at least one metric")
    return names


@overload
def kernel(_func: Callable[..., Any], /) -> Callable[..., ProfileResults]: ...
@overload
def kernel(
    _func: None = None,
    /,
    *,
    configs: Iterable[Any] | None = None,
    runs: int = 3,
    warmup: int = 1,
    metrics: Sequence[str] = (DEFAULT_METRIC,),
    derive_metric: Callable[..., Any] | None = None,
    normalize_against: str | None = None,
    ignore_kernel_list: Sequence[str] | None = None,
    combine_kernel_metrics: Combine = None,
    replay_mode: str = "kernel",
    cache_control: str = "all",
    clock_control: str = "none",
    thermal_mode: str = "auto",
    thermal_wait: float | None = None,
    thermal_cont: float | None = None,
    thermal_timeout: float | None = None,
    thermal_device: int | None = None,
    verbosity: int = VerbosityLevel.INFO,
    output_prefix: str | None = None,
    output_csv: bool = False,
    backend: str = "ncu",
    time_limit_s: float = 600.0,
    diagnose: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., ProfileResults]]: ...
def kernel(
    _func: Callable[..., Any] | None = None,
    /,
    *,
    configs: Iterable[Any] | None = None,
    runs: int = 3,
    warmup: int = 1,
    metrics: Sequence[str] = (DEFAULT_METRIC,),
    derive_metric: Callable[..., Any] | None = None,
    normalize_against: str | None = None,
    ignore_kernel_list: Sequence[str] | None = None,
    combine_kernel_metrics: Combine = None,
    replay_mode: str = "kernel",
    cache_control: str = "all",
    clock_control: str = "none",
    thermal_mode: str = "auto",
    thermal_wait: float | None = None,
    thermal_cont: float | None = None,
    thermal_timeout: float | None = None,
    thermal_device: int | None = None,
    verbosity: int = VerbosityLevel.INFO,
    output_prefix: str | None = None,
    output_csv: bool = False,
    backend: str = "ncu",
    time_limit_s: float = 600.0,
    diagnose: bool = False,
) -> Any:
    """Profile every annotated region of the decorated function, per config and run.

    Usable as ``@kernel``, ``@kernel()`` or ``@kernel(**options)``. Calling the decorated
    function runs it in a fresh worker under ncu and returns `ProfileResults`. ``runs``
    defaults to 3 (Nsight Python: 1, which gives no spread); ``warmup`` calls run outside
    the profiled ranges first. The ``thermal_*`` parameters set the guard that waits
    between runs while the GPU is hot (see `nsight_core.host.thermal`). ``diagnose=True`` adds
    ncu's speed-of-light metrics and attaches `Diagnosis` entries (docs/diagnose.md).
    """
    _check_counts(runs, warmup)
    for name, value in (
        ("clock_control", clock_control),
        ("cache_control", cache_control),
        ("replay_mode", replay_mode),
        ("backend", backend),
    ):
        _check_choice(name, value)
    metric_list = _metric_list(metrics)
    if derive_metric is not None and not callable(derive_metric):
        raise TypeError("derive_metric must be a callable function")
    level = VerbosityLevel(int(verbosity))
    thermal = _thermal_settings(
        thermal_mode, thermal_wait, thermal_cont, thermal_timeout, thermal_device, time_limit_s
    )
    kernels = KernelsSpec(
        combine=_reducers(combine_kernel_metrics),
        ignore=list(ignore_kernel_list or []),
        replay_mode=replay_mode,
    )
    decorated_configs = _FirstCallConfigs(configs)

    def decorate(func: Callable[..., Any]) -> Callable[..., ProfileResults]:
        calls = 0  # Nsight Python's run id: counts successful calls of this function

        @functools.wraps(func)
        def wrapped(
            *args: Any, configs: Iterable[Any] | None = None, **kwargs: Any
        ) -> ProfileResults:
            nonlocal calls
            call_configs = _call_configs(args, kwargs, configs, decorated_configs.read())
            bound = sanitize_configs(func, call_configs)
            arguments = [_arguments_of(func, a, k) for a, k in bound]
            if derive_metric is not None:
                _check_derive(derive_metric, len(metric_list), len(arguments[0]))
            if get_backend(backend).any_metric:  # counters: names checked before any run
                _precheck_metrics(metric_list)
            result = _run(func, bound, thermal, level)
            out = ProfileResults(result, list(arguments[0]), arguments)
            _raise_for_invalid_metrics(out, metric_list)
            _write_files(out, output_prefix, func.__name__, calls, output_csv)
            calls += 1
            _report(level, func.__name__, out)
            return out

        def _run(
            func: Callable[..., Any],
            bound: list[tuple[tuple[Any, ...], dict[str, Any]]],
            thermal: ThermalSettings,
            level: VerbosityLevel,
        ) -> ProfileResult:
            job_dir = _job_dir(output_prefix, func.__name__)
            log = job_dir / "thermal.jsonl"
            if thermal.mode == "manual":
                _require_nvml(thermal)
            target = func
            undo: Callable[[], None] = lambda: None  # noqa: E731
            if thermal.mode != "off":
                target = functools.partial(guarded_call, thermal, str(log), func)
                undo = _register_by_value(func)
            try:
                result = run_function(
                    target,
                    bound,
                    params=[_params_of(func, a, k) for a, k in bound],
                    settings=JobSettings(
                        backend=backend,
                        metrics=tuple(metric_list),
                        cache_control=cache_control,
                        clock_control=clock_control,
                        kernels=kernels,
                        runs=runs,
                        warmup=warmup,
                        time_limit_s=time_limit_s,
                        diagnose=diagnose,
                        combine_fn=(
                            combine_kernel_metrics if callable(combine_kernel_metrics) else None
                        ),
                    ),
                    job_dir=job_dir,
                    derive_metric=derive_metric,
                    normalize_against=normalize_against,
                )
            except NsightCoreError as err:
                raise _nsight_error(err, metric_list) from err
            finally:
                undo()
            _apply_thermal(result, thermal, log)
            return result

        return wrapped

    return decorate(_func) if _func is not None else decorate


class _FirstCallConfigs:
    """Decoration-time configs, read at the first call and kept: Nsight Python leaves a
    generator unconsumed until the function runs (a program may hand one generator to two
    decorators and call only one of them)."""

    def __init__(self, configs: Iterable[Any] | None) -> None:
        self._given = configs
        self._read: list[Any] | None = None

    def read(self) -> list[Any] | None:
        if self._given is not None:
            self._read, self._given = list(self._given), None
        return self._read


def _call_configs(
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    configs: Iterable[Any] | None,
    decorated: list[Any] | None,
) -> list[Any] | None:
    """The configs of one call, by Nsight Python's rules (with its messages)."""
    if kwargs:
        raise ProfilerException(
            f"Keyword arguments are not supported yet: {sorted(kwargs)}",
            ErrorClass.INVALID_REQUEST,
            "pass configs as tuples of positional values",
        )
    if args and configs is not None:
        raise ProfilerException(
            "pass either positional arguments or configs=, not both", ErrorClass.INVALID_REQUEST
        )
    given: list[Any] | None = [args] if args else (None if configs is None else list(configs))
    if given is not None and decorated is not None:
        raise ProfilerException(
            "You have provided configs at decoration time and at runtime. "
            "Provide configs at decoration time or at runtime.",
            ErrorClass.INVALID_REQUEST,
        )
    return given if given is not None else decorated


def _require_nvml(thermal: ThermalSettings) -> None:

    reader, why = nvml_reader(thermal.device)
    if reader is None:
        raise ThermalControlError(
            f"thermal_mode='manual' needs NVML: {why}",
            "use thermal_mode='auto' (records 'unavailable' and goes on) or 'off'",
        )


def _apply_thermal(result: ProfileResult, thermal: ThermalSettings, log: Path) -> None:
    """Copy what the guard saw into each row of the config it guarded."""

    if thermal.mode == "off":
        result.rows = [r.model_copy(update={"ThermalGuard": "off"}) for r in result.rows]
        return
    by_config = summarize(read_log(log))
    if log.is_file():
        result.artifacts["thermal_log"] = str(log)
    notes = list(dict.fromkeys(n for s in by_config.values() for n in s.notes))
    if notes:
        result.message += "; thermal guard: " + "; ".join(notes[:3])
    rows = []
    for row in result.rows:
        s = by_config.get(row.ConfigId)
        if s is None:
            rows.append(row)
            continue
        update: dict[str, Any] = {
            "ThermalGuard": s.status,
            "ThermalWaitS": s.waited_s,
            "GpuTempC": s.temp_c,
            "ThrottleReasons": s.reasons,
        }
        if s.status in ("timed_out", "budget_spent"):
            update["Reasons"] = [*row.Reasons, *(f"thermal guard: {n}" for n in s.notes)]
            if row.Trust in ("ok", "noisy"):
                update["Trust"] = "suspicious"
        rows.append(row.model_copy(update=update))
    result.rows = rows


def _raise_for_invalid_metrics(results: ProfileResults, metrics: Sequence[str]) -> None:
    """Nsight Python raises ValueError for unknown metrics; the results ride on the error."""
    bad = [
        m
        for m in metrics
        if any(r.Metric == m for r in results.result.rows)
        and all(
            r.ErrorClass is ErrorClass.INVALID_METRIC for r in results.result.rows if r.Metric == m
        )
    ]
    if bad:
        err = InvalidMetricsError(bad, "no profiled kernel carries these metrics")
        err.results = results  # type: ignore[attr-defined]
        raise err


def _report(level: VerbosityLevel, name: str, results: ProfileResults) -> None:
    """The INFO/DEBUG summary, on stderr (stdout may be an MCP channel)."""
    if level < VerbosityLevel.INFO:
        return
    r = results.result
    lines = [f"nsight_core: {name}: {r.message}; files in {r.artifacts.get('job_dir', '?')}"]
    guards = {row.ThermalGuard for row in r.rows if row.ThermalGuard}
    waited = sum({row.ConfigId: row.ThermalWaitS or 0.0 for row in r.rows}.values())
    if guards:
        lines.append(
            f"nsight_core: thermal guard: {', '.join(sorted(guards))}; waited {waited:.1f} s"
        )
    if level >= VerbosityLevel.DEBUG and r.provenance is not None and r.provenance.command:
        lines.append("nsight_core: command: " + " ".join(r.provenance.command))
    sys.stderr.write("\n".join(lines) + "\n")


def _job_dir(prefix: str | None, func_name: str) -> Path:
    tag = f"nspy-{func_name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    if prefix is None:
        return Path(tempfile.mkdtemp(prefix=tag + "-"))
    path = Path(f"{prefix}{tag}")
    path.mkdir(parents=True, exist_ok=False)
    return path


def _place(src: Path, dst: Path) -> None:
    """Hard-link (reports are MBs), else copy; an older file of the same name is replaced."""
    with contextlib.suppress(FileNotFoundError):
        dst.unlink()
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _write_files(
    results: ProfileResults, prefix: str | None, func_name: str, index: int, csv: bool
) -> None:
    """Nsight Python's file names beside the job directory: ``{prefix}ncu-output-{func}-{i}
    .ncu-rep`` (and ``.log``), and with ``output_csv`` ``{prefix}profiled_data-{func}-{i}.csv``
    and ``{prefix}processed_data-{func}-{i}.csv``. Without a prefix they go into the job
    directory."""
    art = results.result.artifacts
    base = f"{prefix}" if prefix is not None else str(Path(art.get("job_dir", ".")) / "")
    tag = f"{func_name}-{index}"
    for key, suffix in (("report", ".ncu-rep"), ("ncu_log", ".log")):
        if key in art and Path(art[key]).is_file():
            dst = Path(f"{base}ncu-output-{tag}{suffix}")
            _place(Path(art[key]), dst)
            art[f"nsight_{key}"] = str(dst)
    if not csv:
        return
    for name, frame in (
        ("profiled_data", results.raw_dataframe()),
        ("processed_data", results.to_dataframe()),
    ):
        path = Path(f"{base}{name}-{tag}.csv")
        path.parent.mkdir(parents=True, exist_ok=True)
        frame.to_csv(path, index=False)
        art[name] = str(path)


@contextlib.contextmanager
def ignore_failures() -> Iterator[None]:
    """Nsight Python's ``analyze.ignore_failures()``: swallow any Exception in the block
    (for warm-up code outside annotations)."""
    with contextlib.suppress(Exception):
        yield
