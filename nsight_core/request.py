"""ProfileRequest: what an agent asks `profile_candidates` to do, validated before anything runs.

Every model forbids unknown fields, so a typo (`run` for `runs`) is named in the error instead
of being silently dropped. Numbers and booleans are strict: `runs: "5"` or `enabled: "yes"`
is refused rather than coerced, since a quoted value usually means the caller mixed
something up. `configs` has depth and size limits, so a runaway config is refused by name
instead of reaching JSON parsers with recursion limits. Field descriptions are what an agent
reads in the tool's JSON Schema, paid for in every session's `tools/list`: they say what to
pass, once, and link docs/ (tools.md, correctness.md, stages.md) for the rest.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

# Re-exported: callers name a request's callables through this module.
from nsight_core.runtime.callable_spec import default_inputs as default_inputs
from nsight_core.runtime.callable_spec import parse_callable_spec as parse_callable_spec

# The allowed values of each option, listed once: the Literal types the models (and so the
# JSON Schemas) use, and tuples derived from them for code that checks values by hand.
Backend = Literal["ncu", "cupti", "events"]
BACKENDS: tuple[Backend, ...] = get_args(Backend)
Reducer = Literal["none", "sum", "max", "min", "mean", "first", "last"]
REDUCERS: tuple[Reducer, ...] = get_args(Reducer)
CacheControl = Literal["all", "none"]
CACHE_CONTROLS: tuple[CacheControl, ...] = get_args(CacheControl)
ClockControl = Literal["none", "base"]
CLOCK_CONTROLS: tuple[ClockControl, ...] = get_args(ClockControl)
ReplayMode = Literal["kernel", "range"]
REPLAY_MODES: tuple[ReplayMode, ...] = get_args(ReplayMode)
ScreenBackend = Literal["cupti", "events"]
SCREEN_BACKENDS: tuple[ScreenBackend, ...] = get_args(ScreenBackend)
"""Backends a staged request may screen with: the fast timers (docs/stages.md)."""

MAX_CONFIG_DEPTH = 16
"""Deepest nesting allowed inside one config (a config dict itself is depth 1). Configs are
keyword arguments for `inputs`; real ones are flat or a level or two deep."""
MAX_CONFIGS_BYTES = 256 * 1024
"""Largest `configs` allowed, as compact JSON. Big data belongs in `inputs`, not configs."""

GPU_UUID_PATTERN = r"(GPU|MIG)-[0-9A-Fa-f-]{8,64}"
"""A GPU (or MIG instance) UUID as NVML and nvidia-smi print it."""

DEFAULT_METRIC = "gpu__time_duration.sum"
"""Nsight Python's default metric: GPU time of one kernel, ns."""


def _depth(value: object) -> int:
    """Nesting depth of JSON-like data (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            stack.extend((x, level + 1) for x in item.values())
            deepest = max(deepest, level + 1)
        elif isinstance(item, list | tuple):
            stack.extend((x, level + 1) for x in item)
            deepest = max(deepest, level + 1)
    return deepest


CallableSpec = Annotated[
    str,
    Field(
        min_length=1,
        max_length=1024,
        description="'file.py:name' (under `workdir`), 'package.module:name', or a name in `source`.",
    ),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CheckSpec(_Strict):
    """How candidates are checked before timing (docs/correctness.md)."""

    enabled: bool = Field(
        True,
        strict=True,
        description="Off: every row is marked suspicious.",
    )
    seeds: int = Field(
        3,
        ge=1,
        le=20,
        strict=True,
        description="Seeded inputs checked per config (timed calls are checked too).",
    )
    atol: float | None = Field(
        None,
        ge=0,
        strict=True,
        description="Default: by dtype.",
    )
    rtol: float | None = Field(
        None,
        ge=0,
        strict=True,
        description="Default: by dtype.",
    )
    check_mutation: bool = Field(True, strict=True)
    check_aliasing: bool = Field(
        True,
        strict=True,
        description="Fail an output that views an input or the reference's output.",
    )
    check_determinism: bool = Field(True, strict=True)
    regimes: bool = Field(
        True,
        strict=True,
        description="Also check on scaled, negated and heavy-tailed inputs (untimed).",
    )


class KernelsSpec(_Strict):
    """Several kernels in one call (docs/tools.md)."""

    combine: Reducer | dict[str, Reducer] | None = Field(
        None,
        description=(
            "Fold a call's kernels into one value: a reducer, or metric -> reducer ('none': "
            "one kernel only). Default: .sum metrics summed, others need one kernel."
        ),
    )
    ignore: list[Annotated[str, Field(min_length=1, max_length=512)]] = Field(
        default_factory=list,
        max_length=64,
        description="Globs of kernel names to drop.",
    )
    replay_mode: ReplayMode = Field(
        "kernel",
        description="ncu replay mode; 'range': each call as one range.",
    )

    def named(self, metric: str) -> Reducer | None:
        """The reducer the request names for `metric`; None leaves it to the default
        (rows/run_values.py `reducer_for`)."""
        if isinstance(self.combine, str):
            return self.combine
        return (self.combine or {}).get(metric)


GpuUuid = Annotated[str, Field(pattern=f"^{GPU_UUID_PATTERN}$", max_length=80)]

ConfigValue = int | float | str | bool | None | list[Any] | dict[str, Any]


class StagesSpec(_Strict):
    """Screen every candidate with a fast timer, then profile the reference and the top_k
    fastest under `backend` (docs/stages.md)."""

    screen: ScreenBackend = Field(
        "cupti",
        description="'cupti' falls back to 'events' where it cannot run.",
    )
    top_k: int = Field(
        3,
        ge=1,
        le=31,
        strict=True,
        description="Below len(candidates).",
    )


class BackendFallback(_Strict):
    """What a request named, where this host denies the GPU performance counters its backend
    reads: resolution (plan/request_defaults.py) answers it with a backend that needs none,
    and rows, message and provenance say so (docs/backends.md#counters-denied). Set by the
    resolution, never advertised to callers; a request that carries one is resolved."""

    backend: Backend = Field(description="The backend the request named.")
    metrics: list[str] = Field(description="The metrics it named.")
    reason: str = Field(description="Why that backend cannot run here, as the probe says it.")
    fix: str = Field(description="The cheapest fix, as check_environment's remediation says it.")


def _one_empty_config() -> list[dict[str, ConfigValue]]:
    return [{}]


class ProfileRequest(_Strict):
    """Check candidates against a reference, then profile those that pass."""

    reference: CallableSpec = Field(description="The trusted baseline.")
    candidates: list[CallableSpec] = Field(min_length=1, max_length=32)
    inputs: CallableSpec = Field(  # type: ignore[assignment]  # filled in by _default_inputs
        None,
        description=(
            "f(**config) -> args tuple or kwargs dict, called fresh per seed and run. Default: "
            "the reference module's get_inputs, or generate_input for a GPU MODE ref_kernel."
        ),
    )
    configs: list[dict[str, ConfigValue]] = Field(
        default_factory=_one_empty_config,
        min_length=1,
        max_length=256,
        description="`inputs` kwargs per config, e.g. [{'rows': 4096}].",
    )
    metrics: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(
        default_factory=lambda: [DEFAULT_METRIC],
        min_length=1,
        max_length=64,
        description="ncu metric names (see validate_metrics).",
    )
    runs: int = Field(
        5,
        ge=1,
        le=1000,
        strict=True,
        description="Per candidate and config (>= 3 for a CI).",
    )
    warmup: int = Field(
        1,
        ge=0,
        le=100,
        strict=True,
        description="Unprofiled calls before the runs.",
    )
    backend: Backend = Field(
        "ncu",
        description="'ncu' (any metric), 'cupti' (kernel time), 'events' (event/host time); "
        "omitted with no metrics: the first that works.",
    )
    check: CheckSpec = Field(default=CheckSpec())
    kernels: KernelsSpec = Field(default=KernelsSpec())
    cache_control: CacheControl = Field(
        "all", description="ncu --cache-control; 'all' flushes caches per kernel."
    )
    clock_control: ClockControl = Field(
        "none", description="ncu --clock-control; 'none' leaves clocks alone."
    )
    diagnose: bool = Field(
        False,
        strict=True,
        description="Also say what bounds each candidate, in `diagnoses` (docs/diagnose.md).",
    )
    source: str | None = Field(
        None,
        max_length=1_000_000,
        description="Inline Python source of bare names.",
    )
    reference_source: str | None = Field(
        None,
        max_length=1_000_000,
        description="Inline source of the reference and `inputs`, apart from `source`.",
    )
    workdir: str | None = Field(
        None,
        max_length=4096,
        description="Absolute; relative paths and imports resolve here (default: server's cwd).",
    )
    time_limit_s: float = Field(
        600.0,
        gt=0,
        strict=True,
        le=7200,
        description="Per job (per stage with `stages`); the job is killed after it.",
    )
    device: Annotated[int, Field(ge=0, le=1023, strict=True)] | GpuUuid | None = Field(
        None,
        description="GPU index (as check_environment lists) or UUID; default: a free, idle GPU.",
    )
    stages: StagesSpec | None = None  # described by StagesSpec; None: no screen
    budget_s: float | None = Field(
        None,
        gt=0,
        le=7200,
        strict=True,
        description="With `stages`: for all stages; one out of time is skipped or cut.",
    )
    wait_s: float = Field(
        60.0,
        ge=0,
        strict=True,
        le=3600,
        description="Seconds before answering status 'running'.",
    )
    # Resolution's record, kept with the request (the store's manifest, a cluster worker's
    # copy) and left out of the tools' schema: callers name a backend, never a fallback.
    fallback: SkipJsonSchema[BackendFallback | None] = None

    @model_validator(mode="before")
    @classmethod
    def _default_inputs(cls, data: Any) -> Any:
        """An omitted (or null) `inputs` names the reference module's input maker."""
        if isinstance(data, dict) and data.get("inputs") is None:
            reference = data.get("reference")
            if isinstance(reference, str):
                with contextlib.suppress(ValueError):  # the reference's validation says why
                    return {**data, "inputs": default_inputs(reference)}
        return data

    @field_validator("reference", "inputs")
    @classmethod
    def _spec_ok(cls, v: str) -> str:
        parse_callable_spec(v)
        return v

    @field_validator("configs")
    @classmethod
    def _configs_ok(cls, v: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for i, config in enumerate(v):
            depth = _depth(config)
            if depth > MAX_CONFIG_DEPTH:
                raise ValueError(
                    f"configs[{i}] nests {depth} levels deep, over the limit of "
                    f"{MAX_CONFIG_DEPTH}; keep configs flat (they are keyword arguments for "
                    "`inputs`, e.g. {'rows': 4096}) and build nested data inside `inputs`"
                )
        size = len(json.dumps(v, separators=(",", ":"), default=str))
        if size > MAX_CONFIGS_BYTES:
            raise ValueError(
                f"configs is {size} bytes as JSON, over the limit of {MAX_CONFIGS_BYTES}; "
                "pass sizes and options in configs and build the data inside `inputs`"
            )
        return v

    @field_validator("workdir")
    @classmethod
    def _workdir_ok(cls, v: str | None) -> str | None:
        if v is not None and not os.path.isabs(v):
            raise ValueError(
                f"workdir {v!r} is relative, but it must be an absolute path (the server's "
                f"current directory is {os.getcwd()!r}, which may not be yours); pass the "
                "absolute path of the directory that holds your files"
            )
        return v

    @field_validator("candidates")
    @classmethod
    def _candidates_ok(cls, v: list[str]) -> list[str]:
        for spec in v:
            parse_callable_spec(spec)
        if len(set(v)) != len(v):
            raise ValueError("candidates must be distinct; remove the duplicates")
        return v

    @field_validator("metrics")
    @classmethod
    def _metrics_ok(cls, v: list[str]) -> list[str]:
        stripped = [m.strip() for m in v]
        if len(set(stripped)) != len(stripped):
            raise ValueError("metrics must be distinct; remove the duplicates")
        for m in stripped:
            if not re.fullmatch(r"[A-Za-z0-9_.]+", m):
                raise ValueError(
                    f"metric {m!r} has characters ncu metric names never have; check it with "
                    "validate_metrics"
                )
        return stripped

    @model_validator(mode="after")
    def _consistent(self) -> ProfileRequest:
        def bare(names: list[str]) -> list[str]:
            return [n for n in names if parse_callable_spec(n)[:2] == (None, None)]

        trusted_home = self.source if self.reference_source is None else self.reference_source
        if bare([self.reference, self.inputs]) and trusted_home is None:
            raise ValueError(
                f"bare callable names {bare([self.reference, self.inputs])} need inline "
                "`reference_source` (or `source`); or name them as 'file.py:name' / 'module:name'"
            )
        if bare(self.candidates) and self.source is None:
            raise ValueError(
                f"bare callable names {bare(self.candidates)} need inline `source`; "
                "or name them as 'file.py:name' / 'module:name'"
            )
        if self.reference in self.candidates:
            raise ValueError("the reference is profiled anyway; do not list it among candidates")
        self._stages_consistent()
        # What a backend can measure (metrics, replay modes) is its own preflight's business
        # (collectors/base.py), checked before anything is queued.
        return self

    def _stages_consistent(self) -> None:
        """`stages` and `budget_s` fit the rest of the request (backend fit: stages.py)."""
        if self.budget_s is not None and self.stages is None:
            raise ValueError(
                "budget_s applies to staged evaluation only; set stages (e.g. "
                "{'screen': 'cupti', 'top_k': 3}), or drop budget_s and use time_limit_s"
            )
        if self.stages is not None and self.stages.top_k >= len(self.candidates):
            raise ValueError(
                f"stages.top_k={self.stages.top_k} keeps every one of the "
                f"{len(self.candidates)} candidate(s), so the screen would only add time; "
                f"set stages.top_k below {len(self.candidates)}, or drop stages"
            )

    @property
    def annotations(self) -> list[str]:
        """Annotation names in profile order: the reference first, then candidates."""
        return [self.reference, *self.candidates]


@dataclass(frozen=True)
class NamedFile:
    """A callable of the request named by its file: the file resolved against the workdir."""

    role: Literal["reference", "inputs", "candidate"]
    spec: str
    path: Path


def request_workdir(request: ProfileRequest) -> Path:
    """The directory relative paths resolve against: the request's, else this process's
    current directory (the server's: the one place both the check and the job agree on)."""
    return Path(request.workdir or os.getcwd()).resolve()


def module_of(request: ProfileRequest, spec: str, workdir: Path, *, trusted: bool) -> str:
    """Which module ``spec`` lives in, in words: its resolved file, its module name, or the
    inline source it is a bare name of (``trusted``: the reference or the input maker)."""
    file, module, _ = parse_callable_spec(spec)
    if file is not None:
        return f"file {str((workdir / file).resolve())!r}"
    if module is not None:
        return f"module {module!r}"
    return (
        "the inline `reference_source`"
        if trusted and request.reference_source is not None
        else "the inline `source`"
    )


def candidates_sharing_trusted_modules(request: ProfileRequest, workdir: Path) -> list[str]:
    """Why the reference or the input maker cannot be trusted: each (role, module,
    candidates) where a candidate lives in the same module. The judge imports the trusted
    module, so module-level code of a candidate there would run where verdicts are made
    (docs/correctness.md); empty when they are apart."""
    homes: dict[str, list[str]] = {}
    for cand in request.candidates:
        homes.setdefault(module_of(request, cand, workdir, trusted=False), []).append(cand)
    out = []
    for role, spec in (("reference", request.reference), ("input maker", request.inputs)):
        where = module_of(request, spec, workdir, trusted=True)
        if where in homes:
            shared = ", ".join(repr(c) for c in homes[where])
            out.append(f"the {role} {spec!r} and candidate(s) {shared} are in {where}")
    return out


def named_files(request: ProfileRequest, workdir: Path) -> list[NamedFile]:
    """Every file the request names a callable by, in annotation order (reference, inputs,
    candidates); module specs and bare names in `source` name no file."""
    roles: list[tuple[Literal["reference", "inputs", "candidate"], str]] = [
        ("reference", request.reference),
        ("inputs", request.inputs),
        *(("candidate", c) for c in request.candidates),
    ]
    out = []
    for role, spec in roles:
        try:
            file, _, _ = parse_callable_spec(spec)
        except ValueError:
            continue  # refused by the model's own validation
        if file is not None:
            out.append(NamedFile(role, spec, (workdir / file).resolve()))
    return out
