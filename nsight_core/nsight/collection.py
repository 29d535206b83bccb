"""Where each collector scope runs during a `@kernel` call, and how its values become columns.

The decorated function runs in a fresh worker, so the scopes split by what they describe:

- ONCE and CONFIG collectors describe the host and the config, which do not change while
  the call runs: they run here, in the caller's process, before the worker starts (so their
  side effects, such as a list they append to, are the caller's).
- RUN and ANNOTATION collectors describe the moment of a run or a region: they travel with
  the function into the worker (`collecting_call` wraps it), run before each profiled run
  and as each profiled region is entered (never during warm-up), and hand their values
  back in ``collected_info.pkl`` in the job directory.

Columns follow Nsight Python 1.1: a ONCE collector, and any collector whose values are not
all numbers, gives one column named after it (a non-numeric one takes the first value); a
numeric CONFIG, RUN or ANNOTATION collector gives ``<name>_Avg``, ``_Std`` (sample, ddof 1),
``_Min`` and ``_Max`` over the runs of the row's config (for ANNOTATION, the row's region).
A collector that raised is None there, with one `RuntimeWarning` per collector per call.
"""

from __future__ import annotations

import math
import numbers
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nsight_core.annotation import current_run_context
from nsight_core.nsight.info_collector import (
    CollectionScope,
    InfoCollector,
    annotation_failures,
    call_collector,
    clear_annotation_data,
    get_collected_annotation_data,
    load_collected_info,
    picklable,
    reset_collector_failure_warnings,
    save_collected_info,
    set_annotation_collectors,
    warn_collector_failure,
)

INFO_FILE = "collected_info.pkl"
"""In the job directory: the worker's records while it runs, the whole call's afterwards."""

Config = tuple[Any, ...]


@dataclass(frozen=True)
class WorkerCollectors:
    """What the worker needs: the RUN and ANNOTATION collectors and where to write."""

    run: tuple[InfoCollector, ...]
    annotation: tuple[InfoCollector, ...]
    path: str


def collecting_call(spec: WorkerCollectors, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    """Call ``fn``; around a profiled run, call the RUN collectors first, arm the ANNOTATION
    ones for `annotate`, and append the run's record to ``spec.path``.

    Used as ``functools.partial(collecting_call, spec, fn)`` inside the worker; warm-up
    calls and calls outside a worker collect nothing.
    """
    ctx = current_run_context()
    if ctx is None or not ctx.profiling:
        return fn(*args, **kw)
    config = (*args, *kw.values())
    cells: dict[str, Any] = {}
    failures: list[tuple[str, str, str]] = []
    for c in spec.run:
        cells[c.name], error = call_collector(c, (), config)
        if error is not None:
            failures.append((c.scope.value, c.name, error))
    set_annotation_collectors(spec.annotation, config)
    clear_annotation_data()
    try:
        return fn(*args, **kw)
    finally:
        regions = get_collected_annotation_data()
        failures += annotation_failures()
        set_annotation_collectors([], ())
        clear_annotation_data()
        record = {
            "config_id": ctx.config_id,
            "run_idx": ctx.run,
            "config_info": _only_picklable(cells, "run", failures),
            "annotation_info": [
                {**r, "data": _only_picklable(r["data"], "annotation", failures)} for r in regions
            ],
            "failures": failures,
        }
        save_collected_info(spec.path, [record], append=True)


def _only_picklable(
    cells: dict[str, Any], scope: str, failures: list[tuple[str, str, str]]
) -> dict[str, Any]:
    out = {}
    for name, value in cells.items():
        if picklable(value):
            out[name] = value
        else:
            out[name] = None
            failures.append((scope, name, f"its value {type(value).__name__} is not picklable"))
    return out


@dataclass
class CollectedInfo:
    """A call's collector values: ONCE and CONFIG from the caller, RUN and ANNOTATION from
    the worker's records, keyed by (config id, run)."""

    collectors: list[InfoCollector]
    once: dict[str, Any] = field(default_factory=dict)
    per_config: list[dict[str, Any]] = field(default_factory=list)
    runs: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    numeric: dict[str, bool] = field(default_factory=dict)
    n_runs: int = 1
    """Runs per config: a CONFIG value counts once per run, as in Nsight Python."""

    def run_values(self, c: InfoCollector, annotation: str, config_id: int) -> list[Any]:
        """The collector's values over the runs of one config (and region)."""
        records = [r for (cid, _), r in sorted(self.runs.items()) if cid == config_id]
        if c.scope is CollectionScope.CONFIG:
            cells = self.per_config[config_id] if config_id < len(self.per_config) else {}
            return [cells.get(c.name)] * self.n_runs
        if c.scope is CollectionScope.RUN:
            return [r["config_info"].get(c.name) for r in records]
        return [
            e["data"].get(c.name)
            for r in records
            for e in r["annotation_info"]
            if e["annotation"] == annotation
        ]

    def row_columns(self, annotation: str, config_id: int) -> dict[str, Any]:
        """The aggregated frame's collector columns for one (annotation, config) row."""
        out: dict[str, Any] = {}
        for c in self.collectors:
            if c.scope is CollectionScope.ONCE:
                out[c.name] = self.once.get(c.name)
                continue
            values = self.run_values(c, annotation, config_id)
            if self.numeric.get(c.name):
                out.update(_numeric_columns(c.name, values))
            else:
                out[c.name] = next((v for v in values if v is not None), None)
        return out

    def raw_columns(self, annotation: str, config_id: int, run: int) -> dict[str, Any]:
        """The raw frame's collector columns for one run of one region."""
        out: dict[str, Any] = {}
        record = self.runs.get((config_id, run), {})
        for c in self.collectors:
            if c.scope is CollectionScope.ONCE:
                out[c.name] = self.once.get(c.name)
            elif c.scope is CollectionScope.CONFIG:
                out[c.name] = self.run_values(c, annotation, config_id)[0]
            elif c.scope is CollectionScope.RUN:
                out[c.name] = record.get("config_info", {}).get(c.name)
            else:
                out[c.name] = next(
                    (
                        e["data"].get(c.name)
                        for e in record.get("annotation_info", [])
                        if e["annotation"] == annotation
                    ),
                    None,
                )
        return out


def _is_number(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _numeric_columns(name: str, values: Sequence[Any]) -> dict[str, float]:
    xs = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    nan = float("nan")
    return {
        f"{name}_Avg": statistics.fmean(xs) if xs else nan,
        f"{name}_Std": statistics.stdev(xs) if len(xs) > 1 else nan,
        f"{name}_Min": min(xs) if xs else nan,
        f"{name}_Max": max(xs) if xs else nan,
    }


@dataclass
class CallCollectors:
    """One call's collectors: `start` runs the caller's scopes, `worker` is what travels,
    `finish` reads the worker's records back and writes the call's file."""

    collectors: list[InfoCollector]
    path: Path
    runs: int
    configs: list[Config] = field(default_factory=list)
    info: CollectedInfo | None = None

    def start(self, configs: Sequence[Config]) -> None:
        """Run the caller's scopes (ONCE, then CONFIG per config); a file left at ``path``
        by an earlier call is removed first, so it is never read as this call's."""
        reset_collector_failure_warnings()
        self.path.unlink(missing_ok=True)
        self.configs = [tuple(c) for c in configs]
        by_scope = _by_scope(self.collectors)
        info = CollectedInfo(self.collectors, n_runs=self.runs)
        info.once = {c.name: call_collector(c, (), ())[0] for c in by_scope[CollectionScope.ONCE]}
        info.per_config = [
            {c.name: call_collector(c, (), config)[0] for c in by_scope[CollectionScope.CONFIG]}
            for config in self.configs
        ]
        self.info = info

    def worker(self) -> WorkerCollectors | None:
        by_scope = _by_scope(self.collectors)
        run, ann = by_scope[CollectionScope.RUN], by_scope[CollectionScope.ANNOTATION]
        if not run and not ann:
            return None
        return WorkerCollectors(tuple(run), tuple(ann), str(self.path))

    def finish(self) -> CollectedInfo:
        info = self.info or CollectedInfo(self.collectors, n_runs=self.runs)
        for record in load_collected_info(str(self.path)):
            for scope, name, error in record.get("failures", []):
                warn_collector_failure(name, scope, error)
            info.runs[(record["config_id"], record["run_idx"])] = record
        for c in self.collectors:
            values = (
                [info.once.get(c.name)]
                if c.scope is CollectionScope.ONCE
                else [
                    v
                    for cid in range(len(self.configs))
                    for a in _annotations_of(info, cid)
                    for v in info.run_values(c, a, cid)
                ]
            )
            present = [v for v in values if v is not None]
            info.numeric[c.name] = bool(present) and all(_is_number(v) for v in present)
        save_collected_info(str(self.path), _nsight_records(info, self.configs))
        self.info = info
        return info


def _annotations_of(info: CollectedInfo, config_id: int) -> list[str]:
    names = [
        e["annotation"]
        for (cid, _), r in info.runs.items()
        if cid == config_id
        for e in r["annotation_info"]
    ]
    return list(dict.fromkeys(names)) or [""]


def _by_scope(collectors: Sequence[InfoCollector]) -> dict[CollectionScope, list[InfoCollector]]:
    out: dict[CollectionScope, list[InfoCollector]] = {s: [] for s in CollectionScope}
    for c in collectors:
        out[c.scope].append(c)
    return out


def _nsight_records(info: CollectedInfo, configs: Sequence[Config]) -> list[dict[str, Any]]:
    """Nsight Python's shape of the file: one record per run, every scope in it."""
    out = []
    empty: dict[str, Any] = {"config_info": {}, "annotation_info": []}
    for cid, run in ((c, r) for c in range(len(configs)) for r in range(info.n_runs)):
        r = info.runs.get((cid, run), empty)
        config_cells = info.per_config[cid] if cid < len(info.per_config) else {}
        out.append(
            {
                "config": configs[cid],
                "config_id": cid,
                "run_idx": run,
                "once_info": dict(info.once),
                "config_info": {**config_cells, **r["config_info"]},
                "annotation_info": r["annotation_info"],
            }
        )
    return out


__all__ = ["INFO_FILE", "CallCollectors", "CollectedInfo", "WorkerCollectors", "collecting_call"]
