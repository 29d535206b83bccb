"""Info collectors: user callbacks whose values become columns of a `@kernel` call's rows.

Nsight Python 1.1's vocabulary (``nsight.info_collector``): a collector has a name (its
column), a callback and a `CollectionScope` that says when it is called. This module holds
the pieces both processes use: the records, the name checks, how a callback's arguments
are cut to its signature, the annotation-scope state that `annotate` reads, and the file
the worker hands the values back in. Where each scope runs, and how values become columns,
is `nsight_core.nsight.collection`'s.

The annotation-scope state is process-wide, not per thread: a region entered from a worker
thread must see the collectors the loop set on the main thread.
"""

from __future__ import annotations

import inspect
import pickle
import threading
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from nsight_core.errors import ErrorClass
from nsight_core.exceptions import ProfilerException


class CollectionScope(Enum):
    """When a collector is called.

    ONCE: once per decorated call, without arguments (versions, host facts).
    CONFIG: once per config, with the config's values (sizes derived from it).
    RUN: before every profiled run, with the config's values (clocks, temperatures).
    ANNOTATION: as each profiled region is entered, with its name and the config's values.
    """

    ONCE = "once"
    CONFIG = "config"
    RUN = "run"
    ANNOTATION = "annotation"


def canonical_scope(scope: CollectionScope | str) -> CollectionScope:
    """A scope given as the enum or its value; Nsight Python's message otherwise."""
    if isinstance(scope, CollectionScope):
        return scope
    try:
        return CollectionScope(scope)
    except (TypeError, ValueError):
        names = ", ".join(repr(s.value) for s in CollectionScope)
        raise ValueError(
            f"Invalid collection scope {scope!r}. Expected one of {names} or a CollectionScope."
        ) from None


@dataclass
class InfoCollector:
    """One collector: ``name`` is its column, ``callback`` gives the value, ``scope`` says when."""

    name: str
    callback: Callable[..., Any]
    scope: CollectionScope

    def collect(self, *args: Any) -> Any:
        """Call the callback: without arguments for ONCE, with ``args`` otherwise."""
        if self.scope is CollectionScope.ONCE:
            return self.callback()
        return self.callback(*args)


NSIGHT_RESERVED = frozenset(
    {
        "Annotation", "Value", "Metric", "Kernel", "GPU", "Host", "ComputeClock",
        "MemoryClock", "Unit", "AvgValue", "StdDev", "MinValue", "MaxValue", "NumRuns",
        "CI95_Lower", "CI95_Upper", "RelativeStdDevPct", "StableMeasurement", "Geomean",
        "Normalized", "NormalizationValue",
    }
)  # fmt: skip
"""Column names Nsight Python refuses for a collector (its raw and aggregated columns)."""
OWN_COLUMNS = frozenset(
    {
        "Run", "MedianValue", "RequestedRuns", "Backend", "Evidence", "CacheControl",
        "ClockControl", "ReplayMode", "Trust", "Reasons", "ErrorClass", "Error", "ConfigId",
        "ThermalGuard", "ThermalWaitS", "GpuTempC", "ThrottleReasons", "GPUIndex", "GPUUUID",
        "Stage", "CrossCheck",
    }
)  # fmt: skip
"""Our dataframes' own columns, refused too, so that a collector never hides one."""
RESERVED_COLUMN_NAMES = NSIGHT_RESERVED | OWN_COLUMNS


def parameter_names(func: Callable[..., Any]) -> list[str]:
    """The function's named parameters (its config columns); ``*args``/``**kwargs`` are not."""
    return [
        p.name
        for p in inspect.signature(func).parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


def validate_collectors(
    collectors: Sequence[tuple[str, Callable[..., Any], str]],
    func: Callable[..., Any] | None = None,
) -> None:
    """Refuse names that would overwrite another column, before anything runs.

    A name must be unique, must not be a column of ours or Nsight Python's, and must not be
    a parameter of ``func``. Raises `ProfilerException` (``invalid_request``).
    """
    seen: set[str] = set()
    for name, _, _ in collectors:
        if name in seen:
            raise ProfilerException(
                f"Duplicate info collector name {name!r}: each collector names its own "
                "column (the function's name by default).",
                ErrorClass.INVALID_REQUEST,
            )
        seen.add(name)
        if name in RESERVED_COLUMN_NAMES:
            raise ProfilerException(
                f"Info collector name {name!r} is a reserved column name. Rename the "
                f"collector; reserved: {sorted(RESERVED_COLUMN_NAMES)}.",
                ErrorClass.INVALID_REQUEST,
            )
    if func is None:
        return
    clash = sorted(seen & set(parameter_names(func)))
    if clash:
        raise ProfilerException(
            f"Info collector name {clash[0]!r} is a parameter of {func.__name__!r}; rename "
            "the collector so that its column does not hide the parameter's.",
            ErrorClass.INVALID_REQUEST,
        )


def normalize_collectors(entries: Iterable[Any] | None) -> list[InfoCollector]:
    """`info_collectors` as given (collect-decorated functions, `InfoCollector`s or
    ``(name, callback, scope)`` tuples) as `InfoCollector`s, with Nsight Python's errors."""
    out: list[InfoCollector] = []
    for entry in entries or []:
        if isinstance(entry, InfoCollector):
            out.append(InfoCollector(entry.name, entry.callback, canonical_scope(entry.scope)))
        elif isinstance(entry, tuple):
            if len(entry) != 3:
                raise ValueError(
                    f"An info collector tuple is (name, callback, scope), got {len(entry)} items"
                )
            name, callback, scope = entry
            if not isinstance(name, str) or not callable(callback):
                raise TypeError(
                    "An info collector tuple is (name: str, callback: callable, scope), got "
                    f"({type(name).__name__}, {type(callback).__name__}, ...)"
                )
            out.append(InfoCollector(name, callback, canonical_scope(scope)))
        elif callable(entry):
            scope = getattr(entry, "_nsight_collector_scope", None)
            if scope is None:
                name = getattr(entry, "__name__", repr(entry))
                raise ValueError(
                    f"Collector function {name} is missing "
                    "@nsight.experimental.collect(scope=...) decorator"
                )
            name = getattr(entry, "_nsight_collector_name", entry.__name__)
            out.append(InfoCollector(name, entry, canonical_scope(scope)))
        else:
            raise TypeError(
                "info_collectors takes functions marked with nsight.experimental.collect, "
                f"InfoCollector objects or (name, callback, scope) tuples, got {entry!r}"
            )
    validate_collectors([(c.name, c.callback, c.scope.value) for c in out])
    return out


def bind_args_to_signature(
    callback: Callable[..., Any], leading: Sequence[Any], config: Sequence[Any]
) -> list[Any]:
    """The positional arguments for ``callback``: ``leading`` (the annotation's name, for
    that scope), then as many config values as it takes. A callback with ``*args`` gets the
    whole config; one without a readable signature gets everything."""
    try:
        params = list(inspect.signature(callback).parameters.values())
    except (TypeError, ValueError):
        return [*leading, *config]
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return [*leading, *config]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    room = max(0, len(positional) - len(leading))
    return [*leading, *list(config)[:room]]


# --- failures: one warning per collector and scope per call -------------------------------

_warned: set[tuple[str, str]] = set()


def reset_collector_failure_warnings() -> None:
    """Start a new call: each failing collector warns again, once."""
    _warned.clear()


def warn_collector_failure(name: str, scope: str, exc: BaseException | str) -> None:
    """A `RuntimeWarning` for a collector that raised (its cell is None); once per
    (scope, name) until `reset_collector_failure_warnings`."""
    if (scope, name) in _warned:
        return
    _warned.add((scope, name))
    what = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    warnings.warn(
        f"Info collector {name!r} ({scope} scope) failed: {what}. Its value is None where "
        "it failed.",
        RuntimeWarning,
        stacklevel=2,
    )


def call_collector(
    collector: InfoCollector, leading: Sequence[Any], config: Sequence[Any]
) -> tuple[Any, str | None]:
    """(value, None), or (None, "Type: message") when the callback raised (and a warning)."""
    try:
        return collector.collect(*bind_args_to_signature(collector.callback, leading, config)), None
    except Exception as exc:
        warn_collector_failure(collector.name, collector.scope.value, exc)
        return None, f"{type(exc).__name__}: {exc}"


# --- the annotation scope: state that `annotate` reads as a region is entered -------------


@dataclass
class _AnnotationState:
    collectors: list[InfoCollector] = field(default_factory=list)
    config: tuple[Any, ...] = ()
    collected: list[dict[str, Any]] = field(default_factory=list)
    failures: list[tuple[str, str, str]] = field(default_factory=list)


_state = _AnnotationState()
_state_lock = threading.Lock()


def set_annotation_collectors(
    collectors: Sequence[InfoCollector], current_config: tuple[Any, ...]
) -> None:
    """The ANNOTATION collectors for the run that starts, and its config's values."""
    with _state_lock:
        _state.collectors = list(collectors)
        _state.config = tuple(current_config)


def clear_annotation_data() -> None:
    """Forget what the previous run collected (a new run starts)."""
    with _state_lock:
        _state.collected = []
        _state.failures = []


def collect_for_annotation(annotation_name: str) -> dict[str, Any]:
    """Call the ANNOTATION collectors for a region being entered; {} when none are set."""
    with _state_lock:
        collectors, config = list(_state.collectors), _state.config
    if not collectors:
        return {}
    data: dict[str, Any] = {}
    failed: list[tuple[str, str, str]] = []
    for c in collectors:
        data[c.name], error = call_collector(c, (annotation_name,), config)
        if error is not None:
            failed.append((c.scope.value, c.name, error))
    with _state_lock:
        _state.collected.append({"annotation": annotation_name, "config": config, "data": data})
        _state.failures.extend(failed)
    return data


def get_collected_annotation_data() -> list[dict[str, Any]]:
    """What this run's regions collected, as a copy (the next run clears the original)."""
    with _state_lock:
        return list(_state.collected)


def annotation_failures() -> list[tuple[str, str, str]]:
    """(scope, name, error) of this run's failed ANNOTATION collectors."""
    with _state_lock:
        return list(_state.failures)


# --- the file: the worker hands its values back to the caller -----------------------------


def picklable(value: Any) -> bool:
    """Whether plain pickle takes ``value`` (what the collected-info file needs)."""
    try:
        pickle.dumps(value)
    except Exception:
        return False
    return True


def _sanitized(run: dict[str, Any], bad: list[str]) -> dict[str, Any]:
    def clean(cells: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for k, v in cells.items():
            ok = picklable(v)
            out[k] = v if ok else None
            if not ok:
                bad.append(k)
        return out

    new = dict(run)
    for key in ("once_info", "config_info"):
        if key in new:
            new[key] = clean(dict(new[key]))
    new["annotation_info"] = [
        {**entry, "data": clean(dict(entry.get("data", {})))}
        for entry in run.get("annotation_info", [])
    ]
    return new


def save_collected_info(
    path: str, runs: Sequence[dict[str, Any]], verbosity: int = 0, *, append: bool = False
) -> bool:
    """Pickle ``runs`` (one record per run) as one list to ``path``; True when written.

    A value plain pickle cannot take (a lambda, a CUDA stream, an object of a class the
    caller cannot import) becomes None with a `RuntimeWarning` naming it; a failed write
    warns apart from that and returns False. ``append`` adds the list as another frame
    (`load_collected_info` reads every frame). ``verbosity`` is accepted for Nsight
    Python's signature; nothing is printed.
    """
    del verbosity
    runs = list(runs)
    try:
        data = pickle.dumps(runs)
    except Exception as exc:
        bad: list[str] = []
        runs = [_sanitized(r, bad) for r in runs]
        warnings.warn(
            f"Some collected info was not picklable ({type(exc).__name__}: {exc}); the values "
            f"of {sorted(set(bad))} are None.",
            RuntimeWarning,
            stacklevel=2,
        )
        data = pickle.dumps(runs)
    try:
        with open(path, "ab" if append else "wb") as f:
            f.write(data)
    except OSError as exc:
        warnings.warn(
            f"Failed to save collected info to {path}: {exc}", RuntimeWarning, stacklevel=2
        )
        return False
    return True


def load_collected_info(path: str) -> list[dict[str, Any]]:
    """Every record of every frame in ``path``; a torn last frame (a killed worker) ends it."""
    out: list[dict[str, Any]] = []
    try:
        f = open(path, "rb")  # noqa: SIM115 (read frame by frame below)
    except OSError:
        return out
    with f:
        while True:
            try:
                out.extend(pickle.load(f))
            except EOFError:
                break
            except Exception:  # a frame cut short by a killed worker
                break
    return out


__all__ = [
    "RESERVED_COLUMN_NAMES",
    "CollectionScope",
    "InfoCollector",
    "annotation_failures",
    "bind_args_to_signature",
    "call_collector",
    "canonical_scope",
    "clear_annotation_data",
    "collect_for_annotation",
    "get_collected_annotation_data",
    "load_collected_info",
    "normalize_collectors",
    "parameter_names",
    "picklable",
    "reset_collector_failure_warnings",
    "save_collected_info",
    "set_annotation_collectors",
    "validate_collectors",
    "warn_collector_failure",
]
