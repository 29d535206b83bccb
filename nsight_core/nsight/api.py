"""The Nsight-Python-style `@kernel` decorator, backed by a fresh worker per call.

The decorated function is serialized by value (cloudpickle) and run in a new process that
we start under the backend (ncu by default), so it works from a notebook, never re-runs the
caller's script, and does not care whether the caller already initialized CUDA. Parameter
names and defaults follow Nsight Python where they are sound; docs/compat.md lists where we
differ and why. The decorator's pieces live beside it: `configs` (binding configs),
`thermal_guard`, `collection` (info collectors), `tools` (the default backend),
`nsight_errors` (what a call raises), `profile_results` (what it returns, its files) and
`function_job` (the engine work).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any, overload

from nsight_core.collectors import get_backend
from nsight_core.errors import NsightCoreError
from nsight_core.exceptions import InvalidMetricsError
from nsight_core.host.thermal import ThermalSettings, guarded_call
from nsight_core.nsight.collection import INFO_FILE, CallCollectors, collecting_call
from nsight_core.nsight.configs import (
    Bound,
    FirstCallConfigs,
    arguments_of,
    call_configs,
    config_values,
    params_of,
    sanitize_configs,
)
from nsight_core.nsight.function_job import FunctionRun, run_function
from nsight_core.nsight.info_collector import (
    InfoCollector,
    normalize_collectors,
    validate_collectors,
)
from nsight_core.nsight.nsight_errors import (
    kernel_count_error,
    nsight_error,
    precheck_metrics,
    raise_for_invalid_metrics,
)
from nsight_core.nsight.profile_results import ProfileResults, job_dir_for, write_files
from nsight_core.nsight.thermal_guard import apply_thermal, require_nvml, thermal_settings
from nsight_core.nsight.tools import default_backend
from nsight_core.plan.config import EngineConfig
from nsight_core.request import (
    BACKENDS,
    CACHE_CONTROLS,
    CLOCK_CONTROLS,
    DEFAULT_METRIC,
    REDUCERS,
    REPLAY_MODES,
    KernelsSpec,
    Reducer,
)
from nsight_core.settings import JobSettings

_CHOICES: dict[str, tuple[str, ...]] = {
    "clock_control": CLOCK_CONTROLS,
    "cache_control": CACHE_CONTROLS,
    "replay_mode": REPLAY_MODES,
    "backend": BACKENDS,
}


class VerbosityLevel(IntEnum):
    """Nsight Python's verbosity levels. nsight_core never prints to stdout (it may be an MCP
    channel): INFO writes one summary line per call to stderr, DEBUG adds the profiler
    command and the job directory, SILENT writes nothing."""

    SILENT = 0
    INFO = 3
    DEBUG = 4


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


def _reducers(combine: Combine, metrics: Sequence[str]) -> Reducer | dict[str, Reducer]:
    """The reducers of `combine_kernel_metrics`, every metric named: a metric it leaves out
    keeps Nsight Python's rule, one kernel per call ('none'), not a request's default."""
    if combine is None or callable(combine):
        return "none"  # a callable travels apart, in JobSettings.combine_fn
    names = [combine] if isinstance(combine, str) else list(combine.values())
    for n in names:
        if n not in REDUCERS:
            raise ValueError(f"Invalid reducer {n!r}. Expected one of {', '.join(REDUCERS)}.")
    if isinstance(combine, str):
        return combine  # type: ignore[return-value]
    return {**dict.fromkeys(metrics, "none"), **combine}  # type: ignore[dict-item]


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
    info_collectors: Sequence[Any] | None = None,
    backend: str | None = None,
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
    info_collectors: Sequence[Any] | None = None,
    backend: str | None = None,
    time_limit_s: float = 600.0,
    diagnose: bool = False,
) -> Any:
    """Profile every annotated region of the decorated function, per config and run.

    Usable as ``@kernel``, ``@kernel()`` or ``@kernel(**options)``. Calling the decorated
    function runs it in a fresh worker and returns `ProfileResults`. ``runs`` defaults to 3
    (Nsight Python: 1, which gives no spread); ``warmup`` calls run outside the profiled
    ranges first. ``backend`` None means the active `Tool`'s (see `nsight_core.nsight.tools`),
    else ncu, resolved at the first call. The ``thermal_*`` parameters set the guard that
    waits between runs while the GPU is hot (`nsight_core.host.thermal`). ``info_collectors``
    add columns (`nsight_core.nsight.collection`). ``diagnose=True`` adds ncu's
    speed-of-light metrics and attaches `Diagnosis` entries (docs/diagnose.md). Where Nsight
    Python raises, the call raises the same class (`nsight_core.nsight.nsight_errors`).
    """
    _check_counts(runs, warmup)
    for name, value in (
        ("clock_control", clock_control),
        ("cache_control", cache_control),
        ("replay_mode", replay_mode),
    ):
        _check_choice(name, value)
    if backend is not None:
        _check_choice("backend", backend)
    if derive_metric is not None and not callable(derive_metric):
        raise TypeError("derive_metric must be a callable function")
    combine_fn = combine_kernel_metrics if callable(combine_kernel_metrics) else None
    metric_list = _metric_list(metrics)
    opts = _Options(
        configs=FirstCallConfigs(configs),
        metrics=metric_list,
        derive_metric=derive_metric,
        normalize_against=normalize_against,
        thermal=thermal_settings(
            thermal_mode, thermal_wait, thermal_cont, thermal_timeout, thermal_device, time_limit_s
        ),
        collectors=normalize_collectors(info_collectors),
        level=VerbosityLevel(int(verbosity)),
        output_prefix=output_prefix,
        output_csv=output_csv,
        backend=backend,
        settings=functools.partial(
            JobSettings,
            metrics=tuple(metric_list),
            cache_control=cache_control,
            clock_control=clock_control,
            kernels=KernelsSpec(
                combine=_reducers(combine_kernel_metrics, metric_list),
                ignore=list(ignore_kernel_list or []),
                replay_mode=replay_mode,
            ),
            runs=runs,
            warmup=warmup,
            time_limit_s=time_limit_s,
            diagnose=diagnose,
            combine_fn=combine_fn,
        ),
    )

    def decorate(func: Callable[..., Any]) -> Callable[..., ProfileResults]:
        profiled = _Profiled(func, opts)

        @functools.wraps(func)
        def wrapped(
            *args: Any, configs: Iterable[Any] | None = None, **kwargs: Any
        ) -> ProfileResults:
            return profiled.call(args, kwargs, configs)

        return wrapped

    return decorate(_func) if _func is not None else decorate


@dataclass(frozen=True)
class _Options:
    """A decorator's options, checked once at decoration time."""

    configs: FirstCallConfigs
    metrics: list[str]
    derive_metric: Callable[..., Any] | None
    normalize_against: str | None
    thermal: ThermalSettings
    collectors: list[InfoCollector]
    level: VerbosityLevel
    output_prefix: str | None
    output_csv: bool
    backend: str | None
    settings: Callable[..., JobSettings]
    """`JobSettings` with everything but the backend, which the first call resolves."""


class _Profiled:
    """One decorated function: its options, its backend (resolved at the first call and
    kept, as Nsight Python keeps its collector) and its count of successful calls (Nsight
    Python's run id in file names)."""

    def __init__(self, func: Callable[..., Any], opts: _Options) -> None:
        validate_collectors([(c.name, c.callback, c.scope.value) for c in opts.collectors], func)
        self.func, self.opts = func, opts
        self.backend: str | None = None
        self.calls = 0

    def call(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], configs: Iterable[Any] | None
    ) -> ProfileResults:
        func, opts = self.func, self.opts
        # The `@kernel` API is an edge of the engine: the environment is read here, once a
        # call, and passed down (the metric check and the run see the same ncu).
        config = EngineConfig.from_env()
        self.backend = self.backend or opts.backend or default_backend()
        bound = sanitize_configs(func, call_configs(args, kwargs, configs, opts.configs.read()))
        arguments = [arguments_of(func, b) for b in bound]
        if opts.derive_metric is not None:
            _check_derive(opts.derive_metric, len(opts.metrics), len(arguments[0]))
        if get_backend(self.backend).any_metric:  # counters: names checked before any run
            precheck_metrics(opts.metrics, config)
        job_dir = job_dir_for(opts.output_prefix, func.__name__)
        settings = opts.settings(backend=self.backend)
        gathered = CallCollectors(opts.collectors, job_dir / INFO_FILE, settings.runs)
        gathered.start([config_values(b) for b in bound])
        run = self._run(bound, job_dir, gathered, settings, config)
        collected = gathered.finish() if opts.collectors else None
        out = ProfileResults(run.result, list(arguments[0]), arguments, collected)
        if collected is not None:
            out.result.artifacts["collected_info"] = str(gathered.path)
        raise_for_invalid_metrics(out.result.rows, opts.metrics, out)
        count_error = kernel_count_error(run.measured)
        if count_error is not None:
            count_error.results = out  # type: ignore[attr-defined]
            raise count_error
        write_files(out, opts.output_prefix, func.__name__, self.calls, opts.output_csv)
        self.calls += 1
        _report(opts.level, func.__name__, out)
        return out

    def _run(
        self,
        bound: list[Bound],
        job_dir: Path,
        gathered: CallCollectors,
        settings: JobSettings,
        config: EngineConfig,
    ) -> FunctionRun:
        """The worker's job: the function under its collectors and thermal guard."""
        func, opts, thermal = self.func, self.opts, self.opts.thermal
        log = job_dir / "thermal.jsonl"
        if thermal.mode == "manual":
            require_nvml(thermal)
        target = func
        worker_side = gathered.worker()
        if worker_side is not None:
            target = functools.partial(collecting_call, worker_side, target)
        if thermal.mode != "off":
            target = functools.partial(guarded_call, thermal, str(log), target)
        try:
            run = run_function(
                target,
                bound,
                params=[params_of(func, b) for b in bound],
                settings=settings,
                job_dir=job_dir,
                config=config,
                derive_metric=opts.derive_metric,
                normalize_against=opts.normalize_against,
                by_value=[func, *(c.callback for c in opts.collectors)],
            )
        except NsightCoreError as err:
            raise nsight_error(err, opts.metrics) from err
        apply_thermal(run.result, thermal, log)
        return run


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


@contextlib.contextmanager
def ignore_failures() -> Iterator[None]:
    """Nsight Python's ``analyze.ignore_failures()``: swallow any Exception in the block
    (for warm-up code outside annotations)."""
    with contextlib.suppress(Exception):
        yield


__all__ = [
    "Combine",
    "ProfileResults",
    "VerbosityLevel",
    "ignore_failures",
    "kernel",
    "sanitize_configs",
]
