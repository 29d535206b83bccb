"""The Nsight-Python-style API: ``@kernel`` and `annotate`, backed by a fresh worker under ncu.

The decorated function is serialized by value (cloudpickle) and run in a new process that
we start under ncu, so it works from a notebook, never re-runs the caller's script, and does
not care whether the caller already initialized CUDA. Parameter names and defaults follow
Nsight Python where they are sound; docs/compat.md lists where we differ and why.
"""

from __future__ import annotations

import functools
import inspect
import secrets
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, overload

from nsight_core.errors import ErrorClass, NsightCoreError
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


class ProfileResults:
    """What a ``@kernel`` call returns: rows, failures, raw values and the job's files."""

    def __init__(self, result: ProfileResult, param_names: Sequence[str]) -> None:
        self.result = result
        self._param_names = list(param_names)

    @property
    def rows(self) -> list[Row]:
        return list(self.result.rows)

    @property
    def failures(self) -> list[Failure]:
        return list(self.result.failures)

    @property
    def artifacts(self) -> dict[str, str]:
        return dict(self.result.artifacts)

    def to_dataframe(self) -> Any:
        """One row per (annotation, config, metric); config parameters as columns.

        Columns: Annotation, <params...>, Metric, Unit, AvgValue, MedianValue, StdDev,
        MinValue, MaxValue, NumRuns, RequestedRuns, RelativeStdDevPct, CI95_Lower,
        CI95_Upper, StableMeasurement, Kernel, GPU, Backend, CacheControl, ClockControl,
        ReplayMode, Normalized, Trust, Reasons, ErrorClass, Error. Missing values are NaN
        and the row's Trust/ErrorClass/Error say why.
        """
        import pandas as pd

        records = []
        for row in self.result.rows:
            d = row.model_dump(exclude={"RawValues", "Params", "Kernels", "IgnoredKernels"})
            params = {k: row.Params.get(k) for k in self._param_names}
            records.append({"Annotation": d.pop("Annotation"), **params, **d})
        return pd.DataFrame.from_records(records)


def _check_choice(name: str, value: str) -> str:
    allowed = _CHOICES[name]
    if value not in allowed:
        raise ValueError(
            f"Invalid {name} {value!r}. Expected {' or '.join(repr(a) for a in allowed)}."
        )
    return value


def _reducers(combine: str | Mapping[str, str] | None) -> Reducer | dict[str, Reducer]:
    if combine is None:
        return "none"
    if callable(combine):
        raise ValueError(
            "combine_kernel_metrics takes a reducer name ('sum', 'max', 'min', 'mean', 'first', "
            "'last') or a dict metric -> name, not a function: one operation for every metric "
            "mixes units (see docs/compat.md)"
        )
    names = [combine] if isinstance(combine, str) else list(combine.values())
    for n in names:
        if n not in REDUCERS:
            raise ValueError(f"Invalid reducer {n!r}. Expected one of {', '.join(REDUCERS)}.")
    if isinstance(combine, str):
        return combine  # type: ignore[return-value]
    return dict(combine)  # type: ignore[arg-type]


def sanitize_configs(
    func: Callable[..., Any], configs: Iterable[Any] | None
) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Bind each config to the function's signature, Nsight-Python style.

    A config is a tuple/list of positional values, or a bare scalar for a function with one
    parameter. Short configs are padded with defaults; keyword-only parameters are passed by
    keyword. Messages follow Nsight Python's where they are sound.
    """
    sig = inspect.signature(func)
    params = [p for p in sig.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    required = [p for p in params if p.default is p.empty]
    if configs is None:
        if required:
            raise NsightCoreError(
                ErrorClass.INVALID_REQUEST,
                "You have provided no configs. Provide configs at decoration time or at runtime.",
            )
        return [((), {})]
    if isinstance(configs, str | bytes) or not isinstance(configs, Iterable):
        raise NsightCoreError(
            ErrorClass.INVALID_REQUEST, f"configs must be an iterable, got {type(configs)}"
        )
    items = list(configs)
    if not items:
        raise NsightCoreError(ErrorClass.INVALID_REQUEST, "configs cannot be empty")
    if len(params) == 1:
        items = [c if isinstance(c, tuple | list) and len(c) == 1 else (c,) for c in items]
    if not all(isinstance(c, tuple | list) for c in items):
        raise NsightCoreError(
            ErrorClass.INVALID_REQUEST,
            "each config must be a tuple of arguments (a bare value only for one-parameter functions)",
        )
    lengths = [len(c) for c in items]
    if len(set(lengths)) > 1:
        raise NsightCoreError(
            ErrorClass.INVALID_REQUEST,
            f"All configs must have the same number of arguments. Found lengths: {lengths}",
        )
    n = lengths[0]
    if not len(required) <= n <= len(params):
        expects = (
            str(len(params))
            if len(required) == len(params)
            else f"between {len(required)} and {len(params)}"
        )
        raise NsightCoreError(
            ErrorClass.INVALID_REQUEST,
            f"Configs have {n} arguments, but function expects {expects}",
        )
    bound = []
    for c in items:
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for i, p in enumerate(params):
            value = c[i] if i < n else p.default
            if p.kind == p.KEYWORD_ONLY:
                kwargs[p.name] = value
            else:
                args.append(value)
        bound.append((tuple(args), kwargs))
    return bound


def _params_of(
    func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    names = [
        p.name
        for p in inspect.signature(func).parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    values = dict(zip(names, args, strict=False)) | kwargs
    return {
        k: v if isinstance(v, int | float | str | bool | type(None)) else repr(v)
        for k, v in values.items()
    }


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
    combine_kernel_metrics: str | Mapping[str, str] | None = None,
    replay_mode: str = "kernel",
    cache_control: str = "all",
    clock_control: str = "none",
    output_prefix: str | None = None,
    output_csv: bool = False,
    backend: str = "ncu",
    time_limit_s: float = 600.0,
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
    combine_kernel_metrics: str | Mapping[str, str] | None = None,
    replay_mode: str = "kernel",
    cache_control: str = "all",
    clock_control: str = "none",
    output_prefix: str | None = None,
    output_csv: bool = False,
    backend: str = "ncu",
    time_limit_s: float = 600.0,
) -> Any:
    """Profile every annotated region of the decorated function, per config and run.

    Usable as ``@kernel``, ``@kernel()`` or ``@kernel(**options)``. Calling the decorated
    function runs it in a fresh worker under ncu and returns `ProfileResults`. ``runs``
    defaults to 3 (Nsight Python: 1, which gives no spread); ``warmup`` calls run outside
    the profiled ranges first.
    """
    if not isinstance(runs, int) or isinstance(runs, bool) or runs < 1:
        raise ValueError(f"runs must be a positive integer, got {runs!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be a non-negative integer, got {warmup!r}")
    for name, value in (
        ("clock_control", clock_control),
        ("cache_control", cache_control),
        ("replay_mode", replay_mode),
        ("backend", backend),
    ):
        _check_choice(name, value)
    metric_list = [m.strip() for m in ([metrics] if isinstance(metrics, str) else metrics)]
    if not metric_list:
        raise ValueError("metrics must name at least one metric")
    if derive_metric is not None and not callable(derive_metric):
        raise TypeError("derive_metric must be a callable function")
    kernels = KernelsSpec(
        combine=_reducers(combine_kernel_metrics),
        ignore=list(ignore_kernel_list or []),
        replay_mode=replay_mode,
    )
    decorated_configs = None if configs is None else list(configs)

    def decorate(func: Callable[..., Any]) -> Callable[..., ProfileResults]:
        @functools.wraps(func)
        def wrapped(
            *args: Any, configs: Iterable[Any] | None = None, **kwargs: Any
        ) -> ProfileResults:
            if kwargs:
                raise NsightCoreError(
                    ErrorClass.INVALID_REQUEST,
                    f"Keyword arguments are not supported yet: {sorted(kwargs)}",
                    "pass configs as tuples of positional values",
                )
            if args and configs is not None:
                raise NsightCoreError(
                    ErrorClass.INVALID_REQUEST,
                    "pass either positional arguments or configs=, not both",
                )
            call_configs: list[Any] | None = (
                [args] if args else (None if configs is None else list(configs))
            )
            if call_configs is not None and decorated_configs is not None:
                raise NsightCoreError(
                    ErrorClass.INVALID_REQUEST,
                    "You have provided configs at decoration time and at runtime. "
                    "Provide configs at decoration time or at runtime.",
                )
            bound = sanitize_configs(
                func, call_configs if call_configs is not None else decorated_configs
            )
            from nsight_core.function_job import run_function

            result = run_function(
                func,
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
                ),
                job_dir=_job_dir(output_prefix, func.__name__),
                derive_metric=derive_metric,
                normalize_against=normalize_against,
            )
            names = list(_params_of(func, *bound[0]))
            out = ProfileResults(result, names)
            if output_csv:
                _write_csvs(out, output_prefix, func.__name__, result.result_id)
            return out

        return wrapped

    return decorate(_func) if _func is not None else decorate


def _job_dir(prefix: str | None, func_name: str) -> Path:
    tag = f"nspy-{func_name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    if prefix is None:
        return Path(tempfile.mkdtemp(prefix=tag + "-"))
    path = Path(f"{prefix}{tag}")
    path.mkdir(parents=True, exist_ok=False)
    return path


def _write_csvs(results: ProfileResults, prefix: str | None, func_name: str, tag: str) -> None:
    base = Path(results.result.artifacts.get("job_dir", ".")) if prefix is None else None
    stem = f"{func_name}-{tag}"
    processed = results.to_dataframe()
    raw_records = [
        {
            "Annotation": r.Annotation,
            **r.Params,
            "Metric": r.Metric,
            "Run": i,
            "Value": v,
            "Unit": r.Unit,
        }
        for r in results.rows
        for i, v in enumerate(r.RawValues)
    ]
    import pandas as pd

    for name, frame in (
        ("profiled_data", pd.DataFrame.from_records(raw_records)),
        ("processed_data", processed),
    ):
        path = (
            (base / f"{name}-{stem}.csv")
            if base is not None
            else Path(f"{prefix}{name}-{stem}.csv")
        )
        frame.to_csv(path, index=False)
        results.result.artifacts[name] = str(path)
