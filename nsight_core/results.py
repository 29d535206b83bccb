"""Result models: what a profile job produces and what `read_results` returns.

Field descriptions here become the JSON Schema an agent reads: the ones `tools/list` carries
(nspy_mcp/server.py, RESULT_OUTPUT) are short, since every session pays for them, and
docs/rows.md and docs/results.md say the rest. JSON has no NaN: a missing number is
``null`` and the row's `Trust`, `Reasons`, `ErrorClass` and `Error` say why. What bounds a
candidate (a result's ``diagnoses``) has its models in diagnosis.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from nsight_core.diagnosis import Diagnosis
from nsight_core.errors import ErrorClass as ErrorClassT

TrustLevel = Literal["ok", "noisy", "suspicious", "failed"]
JobStatus = Literal["queued", "running", "done", "failed", "cancelled"]
StageName = Literal["screen", "profile"]
"""The stages of a staged request (docs/stages.md): 'screen' checks and times every candidate
with a fast timer, 'profile' measures the reference and the best few under ncu."""
StageStatus = Literal["pending", "running", "done", "cut", "skipped", "failed", "cancelled"]
EvidenceKind = Literal["external", "in_process"]
"""Where a number comes from: a profiler outside the candidate's process (ncu), or a timer
inside it (events, cupti), which the candidate could in principle tamper with."""


def utc_now() -> datetime:
    """The one clock of results and the store (aware, UTC)."""
    return datetime.now(UTC)


def iso(dt: datetime) -> str:
    """Timestamps as results carry them: ISO 8601, UTC, to the millisecond."""
    return dt.isoformat(timespec="milliseconds")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CrossCheckValue(_Model):
    """The same candidate and config as measured by another backend of this result.

    Set on the profile stage's time rows and comparisons of a staged request, from the
    screen (docs/stages.md, "Cross-check"); disagreement beyond the stated bounds is in
    `Reasons`.
    """

    Backend: str = Field(description="The other backend: the screen's (cupti or events).")
    Metric: str = Field(
        description="Its metric (cupti__time_duration.sum, events__time_duration); on a "
        "comparison, the metric of the screen's Speedup."
    )
    Value: float | None = Field(
        description="On a row: the other backend's MedianValue, in ns; on a comparison: the "
        "screen's Speedup."
    )
    DeviationPct: float | None = Field(
        description="100 * (Value - this MedianValue (or Speedup)) / this: negative when the "
        "other backend measured less time (or a smaller speedup)."
    )


class GpuReadings(_Model):
    """The job's GPU around a row's runs: the judge read NVML right before each timed call
    went out and right after its reply (in-process backends; docs/rows.md, "GPU state")."""

    SmClockMHz: list[int] = Field(description="Lowest and highest SM clock read (MHz).")
    SmClockStartEndMHz: list[int] = Field(
        description="SM clock at the first run's start and at the last run's end (MHz)."
    )
    TempC: list[int] = Field(description="Lowest and highest GPU temperature read (C).")
    Throttle: list[str] = Field(
        default_factory=list,
        description="Slowdown reasons active at a reading (power cap, thermal, hardware).",
    )


StageOf = Annotated[
    StageName | None,
    Field(
        description="With `stages`: the stage that produced this ('screen' or 'profile'); "
        "null in a single-stage job."
    ),
]
CrossCheckOf = Annotated[
    CrossCheckValue | None,
    Field(
        description="With `stages`: the screen's measurement of the same annotation and "
        "config (profile stage's time rows and comparisons only); null otherwise."
    ),
]


class Row(_Model):
    """One (annotation, config, metric): statistics over runs, with a trust verdict."""

    Annotation: str = Field(description="The callable (reference or candidate) this row measures.")
    ConfigId: int = Field(description="Index of the config in the request's `configs`.")
    Params: dict[str, Any] = Field(description="The config: keyword arguments given to `inputs`.")
    Metric: str = Field(description="Metric name (ncu name, or a derived/normalized name).")
    Unit: str | None = Field(description="As the report states it; 'ratio' when normalized.")
    AvgValue: float | None = Field(description="Mean over valid runs; null if none is valid.")
    MedianValue: float | None = Field(description="Median over valid runs.")
    StdDev: float | None = Field(
        description="Sample standard deviation (ddof=1); null for < 2 runs."
    )
    MinValue: float | None = Field(description="Smallest valid run value.")
    MaxValue: float | None = Field(description="Largest valid run value.")
    NumRuns: int = Field(description="Number of valid runs that entered the statistics.")
    RequestedRuns: int = Field(description="NumRuns < RequestedRuns: some runs failed.")
    RelativeStdDevPct: float | None = Field(description="100 * StdDev / |AvgValue|.")
    CI95_Lower: float | None = Field(description="Lower end of the t-based 95 % CI of the mean.")
    CI95_Upper: float | None = Field(description="Upper end of the t-based 95 % CI of the mean.")
    StableMeasurement: bool | None = Field(description="RelativeStdDevPct < 2 %.")
    Kernel: str | None = Field(
        description="Kernel function name; names joined by '|' when combined; 'range' in range replay."
    )
    Kernels: list[str] = Field(default_factory=list, description="Distinct kernel names seen.")
    IgnoredKernels: list[str] = Field(
        default_factory=list, description="Kernel names dropped by the ignore globs."
    )
    GPU: str | None = Field(None, description="Device name as the profiler reports it.")
    Backend: str = Field(description="'ncu', 'cupti' or 'events': where the numbers come from.")
    Evidence: EvidenceKind = Field(
        "external",
        description="'external': measured outside the candidate's process (ncu); "
        "'in_process': timed inside it (events, cupti), which it could tamper with.",
    )
    CacheControl: str | None = Field(None, description="ncu --cache-control in force.")
    ClockControl: str | None = Field(None, description="ncu --clock-control in force.")
    ReplayMode: str | None = Field(None, description="ncu --replay-mode in force.")
    Normalized: str | None = Field(
        None, description="The baseline when values are per-run ratios to it."
    )
    Trust: TrustLevel = Field(
        description="ok | noisy (spread or GPU clock moved) | suspicious, failed (see Reasons)."
    )
    Reasons: list[str] = Field(default_factory=list, description="Why Trust is not 'ok'.")
    ErrorClass: ErrorClassT | None = Field(None, description="Failure class when runs failed.")
    Error: str | None = Field(None, description="Failure message when runs failed.")
    RawValues: list[float | None] = Field(
        default_factory=list, description="Per run; null: a failed run."
    )
    ThermalGuard: str | None = Field(
        None,
        description="@kernel thermal guard before this config's runs: off | unavailable | ok | "
        "waited | budget_spent | timed_out (the worst seen); null when no guard ran.",
    )
    ThermalWaitS: float | None = Field(
        None, description="Seconds the thermal guard waited before this config's runs."
    )
    GpuTempC: float | None = Field(
        None, description="Highest GPU temperature (C) the thermal guard read before the runs."
    )
    ThrottleReasons: list[str] = Field(
        default_factory=list,
        description="NVML clock-event reasons the thermal guard saw before the runs.",
    )
    GPUIndex: int | None = Field(
        None, description="NVML index of the GPU the job ran on (its host's numbering)."
    )
    GPUUUID: str | None = Field(None, description="UUID of the GPU the job ran on.")
    Stage: StageOf = None
    CrossCheck: CrossCheckOf = None
    GpuState: GpuReadings | None = Field(
        None, description="SM clock and temperature around the runs (events, cupti)."
    )


_TRUST_ORDER: tuple[TrustLevel, ...] = ("ok", "noisy", "suspicious", "failed")


def marked(row: Row, reason: str, trust: TrustLevel = "ok") -> Row:
    """``row`` with ``reason`` among its Reasons and its Trust at least ``trust`` (ok <
    noisy < suspicious < failed): a row is never made more trusted, and a failed row gains
    the reason too (it then says more, never less). The one rule every stage that notes,
    doubts or marks a row noisy applies; a reason already there is not repeated."""
    if reason in row.Reasons:
        return row
    level = max(row.Trust, trust, key=_TRUST_ORDER.index)
    return row.model_copy(update={"Trust": level, "Reasons": [*row.Reasons, reason]})


def suspected(row: Row, reason: str) -> Row:
    """``row`` marked 'suspicious' for ``reason`` (`marked`)."""
    return marked(row, reason, "suspicious")


class Comparison(_Model):
    """A candidate against the reference on one config and metric, from paired runs."""

    Annotation: str = Field(description="The candidate.")
    Baseline: str = Field(description="The reference it is compared with.")
    ConfigId: int
    Params: dict[str, Any]
    Metric: str
    Ratio: float | None = Field(description="1/Speedup.")
    Speedup: float | None = Field(
        description="Median per-run reference/candidate (lower-is-better metrics)."
    )
    Speedup_CI95_Lower: float | None = Field(description="95 % CI, paired runs.")
    Speedup_CI95_Upper: float | None = None
    Resolvable: bool | None = Field(
        description="The CI excludes 1.0 (on a CPU, by more than the noise): the verdict."
    )
    NumPairs: int = Field(description="Runs valid for both.")
    Reasons: list[str] = Field(default_factory=list)
    Stage: StageOf = None
    CrossCheck: CrossCheckOf = None


def comparison_noted(c: Comparison, reason: str) -> Comparison:
    """``c`` with ``reason`` among its Reasons, not repeated: `marked`'s rule for a
    comparison, which has no Trust to raise."""
    if reason in c.Reasons:
        return c
    return c.model_copy(update={"Reasons": [*c.Reasons, reason]})


class Correctness(_Model):
    """The correctness verdict of one candidate on one config, over all seeds."""

    Annotation: str
    ConfigId: int
    Params: dict[str, Any]
    Passed: bool
    Seeds: int
    MaxAbsError: float | None = None
    MaxRelError: float | None = None
    MismatchCount: int | None = None
    FirstBadIndex: list[int] | None = None
    Reasons: list[str] = Field(default_factory=list)
    ErrorClass: ErrorClassT | None = None
    Error: str | None = None
    Stage: StageName | None = Field(
        None,
        description="With `stages`: the stage that produced this ('screen' or 'profile'); "
        "null in a single-stage job.",
    )


class Failure(_Model):
    """A failure of a callable, a run, or the whole job."""

    Annotation: str | None = None
    ConfigId: int | None = None
    Run: int | None = None
    Phase: str | None = None
    ErrorClass: ErrorClassT
    Error: str
    Hint: str = ""
    Traceback: str = ""
    File: str | None = None
    Line: int | None = None
    Stage: StageName | None = Field(
        None,
        description="With `stages`: the stage that produced this ('screen' or 'profile'); "
        "null in a single-stage job.",
    )


class Provenance(_Model):
    """Where and how the numbers were made."""

    backend: str
    gpu: str | None = None
    gpu_uuid: str | None = None
    gpu_index: int | None = Field(
        None, description="NVML index of the GPU the job ran on, on `host`."
    )
    driver: str | None = None
    ncu_version: str | None = None
    ncu_report_version: str | None = None
    nspy_version: str
    python: str | None = None
    host: str | None = None
    cache_control: str | None = None
    clock_control: str | None = None
    replay_mode: str | None = None
    command: list[str] = Field(default_factory=list, description="The profiler command line.")
    phase_seconds: dict[str, float] = Field(
        default_factory=dict,
        description=(
            "Where the job's wall time went, in seconds: the judge's phases (spawn: its start "
            "until the contestant is started, 0 for a judge pre-started before the request; "
            "launch, cold jobs only: the contestant's start until its own interpreter ran, "
            "under ncu ncu's own start; "
            "standby_idle: how long such a judge waited for it; import; check; profile; exit: "
            "waiting for the contestant and its profiler to end; judge: the judge's own work "
            "per call, with nvml: its readings of the GPU around timed calls; roundtrips: waiting "
            "on the contestant's replies) and the contestant's "
            "own account under 'contestant.' keys (process, frameworks, cuda, timer, "
            "waited_for_job, confine, load, inputs, call, structure, output, watch; "
            "cuda_thread: its CUDA side thread's own time, which overlapped frameworks; "
            "triton_thread and triton_wait: Triton's start on a side thread in a cold ncu job, "
            "and how long the candidates' load waited for it). Contestant "
            "keys come from the candidates' process: for benchmarks, never for verdicts. "
            "A cold job also has the judge's own start under 'judge.' keys (import, job, "
            "frameworks, cuda, warm, nvml; waited: for its contestant's start)."
        ),
    )
    wall_seconds: float | None = Field(
        None,
        description="Seconds the job's processes ran (the judge's start, or its handover to a "
        "pre-started one, until its end): waits before that are in `waited_seconds`.",
    )
    queued_seconds: float | None = Field(
        None,
        description="Seconds from the request's submission until the job started on its "
        "device (behind other jobs, or for a GPU another process holds; a cluster worker). "
        "Part of `waited_seconds`; null where no queue ran the job (the engine called "
        "directly).",
    )
    waited_seconds: float | None = Field(
        None,
        description="Seconds the job waited before its processes ran, apart from "
        "`wall_seconds`: the sum of `waits`. Request time = waited_seconds + wall_seconds + "
        "the assembly of the result.",
    )
    waits: dict[str, float] = Field(
        default_factory=dict,
        description=(
            "Where `waited_seconds` went, by cause (only causes that cost time): queue (behind "
            "other jobs of this server for the GPU or CPU slot, or for a cluster worker); device "
            "(the GPU's lock held by another nspy-mcp process, or every free GPU busy with other "
            "processes); prestart (a restarted server starting the standbys its store "
            "remembers); standby (a pre-started judge finishing its start, or one being "
            "retired); previous_job (the previous job's judge still ending). No start-up or "
            "teardown may overlap a measurement, so these are waited out, not run alongside."
        ),
    )
    contestant_confined: bool | None = Field(
        None,
        description="True when the candidates' process could reach only its workdir, private "
        "directory and system files (Landlock), not the result store; null for @kernel jobs.",
    )
    notes: list[str] = Field(default_factory=list, description="Remarks on how the job ran.")


class ScreenRank(_Model):
    """One candidate's place after the screen stage, and why it was kept or not."""

    Annotation: str
    Rank: int | None = Field(
        description="1 = fastest; null when the candidate could not be ranked (see Why)."
    )
    Speedup: float | None = Field(
        description="Geometric mean over configs of the screen's Speedup against the reference "
        "(reference time / candidate time); null when not ranked."
    )
    Suspicious: bool = Field(
        False, description="A screen row was suspicious: ranked after every clean candidate."
    )
    Kept: bool = Field(description="Went on to the profile stage.")
    Why: str = Field(description="Why it was kept or left out.")


class StageReport(_Model):
    """One stage of a staged request: what it ran on, how it ended, and why."""

    Stage: StageName
    Backend: str = Field(description="The backend this stage ran (or would have run) under.")
    Status: StageStatus = Field(
        description="pending | running | done | cut (stopped when budget_s was spent; rows so "
        "far kept) | skipped (never started; Reason says why) | failed | cancelled."
    )
    Annotations: list[str] = Field(
        default_factory=list, description="What it measures: the reference first, then candidates."
    )
    TimeLimitS: float | None = Field(
        None, description="The time limit it ran under: time_limit_s or what was left of budget_s."
    )
    WallSeconds: float | None = Field(None, description="How long it ran.")
    EtaS: float | None = Field(
        None, description="While it runs: estimated seconds left (docs/stages.md says how)."
    )
    Reason: str | None = Field(None, description="Why it was skipped, cut, failed or changed.")
    Ranking: list[ScreenRank] = Field(
        default_factory=list, description="Screen stage: every candidate's rank and fate."
    )


class BestCandidate(_Model):
    """A lineage's best trusted candidate, with its speedup as its own job measured it."""

    annotation: str
    source_sha256: str | None = Field(description="Of its file or inline source; null: module.")
    speedup: float = Field(description="Against the reference: geometric mean over configs.")
    ci95_lower: float
    ci95_upper: float
    result_id: str = Field(description="The job that measured it (retention may prune it).")
    since: str = Field(description="When it became the best (ISO 8601, UTC).")


class BestVerdict(_Model):
    """Whether one candidate of this job beats the best so far, and why."""

    annotation: str
    beats_best: Literal["yes", "no", "unresolved", "first"] | None = Field(
        description="yes/no/unresolved against the incumbent; 'first' when there was none "
        "and it qualifies; null when it cannot take part (see why)."
    )
    speedup: float | None = Field(description="Against the reference, over configs.")
    ci95_lower: float | None = None
    ci95_upper: float | None = None
    vs_best: float | None = Field(description="Its speed over the incumbent's (estimate).")
    why: str


class BestSoFar(_Model):
    """Done jobs: the best so far, and whether each candidate beats it (docs/results.md)."""

    lineage: str = Field(
        description="Id of what makes jobs comparable: reference and its source, inputs, "
        "configs, backend, time metric, GPU."
    )
    incumbent: BestCandidate | None = Field(description="The best before this job; null: none.")
    verdicts: list[BestVerdict] = Field(default_factory=list)
    new_best: str | None = Field(description="The candidate that became the best; null: same.")


class ProfileResult(_Model):
    """Everything a profile job produced."""

    result_id: str
    status: JobStatus
    message: str = Field("", description="What happened and what to do next.")
    created_at: str
    finished_at: str | None = None
    rows: list[Row] = Field(default_factory=list)
    comparisons: list[Comparison] = Field(default_factory=list)
    correctness: list[Correctness] = Field(default_factory=list)
    failures: list[Failure] = Field(default_factory=list)
    error: Failure | None = Field(None, description="Set when the whole job failed.")
    provenance: Provenance | None = None
    artifacts: dict[str, str] = Field(default_factory=dict, description="Paths of the job's files.")
    diagnoses: list[Diagnosis] = Field(
        default_factory=list,
        description="With diagnose: what bounds each (docs/diagnose.md).",
    )
    stages: list[StageReport] = Field(
        default_factory=list,
        description="With `stages`: each stage's status and why.",
    )
    best_so_far: BestSoFar | None = None  # documented by its model, for a compact tools/list
