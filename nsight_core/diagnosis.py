"""The diagnosis models: what bounds a candidate, and how far it is from the limit.

A `Diagnosis` is one part of a `ProfileResult` (its ``diagnoses``, with `diagnose`): the
rows say how fast a candidate is, a diagnosis says why, from ncu's speed-of-light metrics,
its rules and the bytes a call must move (rows/diagnose.py makes them, docs/diagnose.md
describes them). Field descriptions become the JSON Schema an agent reads.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


BoundKind = Literal["memory", "compute", "latency", "launch/host"]


class RuleFinding(_Model):
    """One ncu rule result, shortened: ncu's own reading of the kernel."""

    Rule: str = Field(description="ncu's rule name, e.g. 'SOLBottleneck'.")
    Section: str | None = Field(None, description="The ncu section the rule belongs to.")
    Severity: Literal["none", "ok", "optimization", "warning", "error"] = Field(
        description="ncu's message type: optimization = a suggestion, warning = a fixable issue."
    )
    Title: str = Field("", description="The rule message's title.")
    Text: str = Field("", description="The rule message without links, cut to 300 characters.")
    EstimatedSpeedupPct: float | None = Field(
        None, description="ncu's estimated speedup (%) if the issue were fixed; null if none."
    )


class Diagnosis(_Model):
    """What bounds one (annotation, config), how far from the limit, and what to try next.

    Numbers are medians over runs, several kernels of a call folded (times and bytes
    summed, percentages time-weighted). Every null field has its reason in `Why`.
    """

    Annotation: str
    ConfigId: int
    Params: dict[str, Any] = Field(default_factory=dict)
    Bound: BoundKind | None = Field(
        None,
        description="memory | compute (speed-of-light >= 60 % of peak, the larger wins) | "
        "latency (both below 60 %) | launch/host (kernel much shorter than the host call).",
    )
    TimeNs: float | None = Field(None, description="gpu__time_duration.sum of the call (ns).")
    ComputeThroughputPct: float | None = Field(
        None, description="sm__throughput.avg.pct_of_peak_sustained_elapsed: SM speed of light."
    )
    MemoryThroughputPct: float | None = Field(
        None,
        description="gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed: the "
        "busiest memory unit (L1, L2, DRAM) against its peak.",
    )
    TensorPipePct: float | None = Field(
        None, description="Tensor pipe active cycles, % of peak over the elapsed time."
    )
    DramBytes: float | None = Field(None, description="dram__bytes.sum: bytes read + written.")
    DramBandwidth: float | None = Field(None, description="DramBytes / TimeNs, bytes/s.")
    DramPeakBandwidth: float | None = Field(
        None,
        description="ncu's peak: dram__bytes.sum.peak_sustained x "
        "dram__cycles_elapsed.avg.per_second, bytes/s.",
    )
    DramPct: float | None = Field(None, description="100 * DramBandwidth / DramPeakBandwidth.")
    Headroom: float | None = Field(
        None,
        description="Upper bound on the speedup left for the limiting resource (2.0 = at most "
        "2x faster by that resource alone), under `Assumptions`; null for latency-bound.",
    )
    HeadroomResource: str | None = Field(None, description="The resource Headroom is about.")
    Assumptions: list[str] = Field(
        default_factory=list, description="What Headroom assumes; it is a bound, not a promise."
    )
    FloorNs: float | None = Field(
        None,
        description="Time to write the outputs at peak DRAM bandwidth (ns): rows far below "
        "it are suspicious.",
    )
    ReadWriteFloorNs: float | None = Field(
        None, description="Time to read every input and write every output at peak (ns)."
    )
    FloorBytesIn: int | None = Field(
        None, description="Bytes of the inputs, as the judge made them."
    )
    FloorBytesOut: int | None = Field(
        None, description="Bytes of the expected outputs, as the reference returned them."
    )
    PeakSource: str | None = Field(None, description="Where the floor's peak bandwidth came from.")
    GridSize: float | None = Field(None, description="launch__grid_size (largest kernel).")
    BlockSize: float | None = Field(None, description="launch__block_size (largest kernel).")
    Kernels: list[str] = Field(default_factory=list, description="Kernels of the call, in order.")
    NumRuns: int = Field(0, description="Runs the medians are taken over.")
    Rules: list[RuleFinding] = Field(
        default_factory=list, description="ncu's rule results for these kernels, deduplicated."
    )
    NextStep: str | None = Field(None, description="One thing to try next, given the bound.")
    Why: list[str] = Field(
        default_factory=list, description="Why each null field is null, and caveats."
    )
