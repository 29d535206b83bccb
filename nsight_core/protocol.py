"""Messages between the parent (server, `@kernel` caller) and a job's processes; all import this.

Contract:

- The parent writes one ``job.json`` (a `JobSpec`) into a fresh job directory and starts
  the job: for a request it hands JOB_DIR to a judge (``python -m nsight_core.judge.boot``,
  started before or for the job: standby.py) over its socket, and the judge starts the
  contestant (under ``ncu`` for ncu); an `@kernel` job: ``... contestant --function JOB_DIR``.
- The job's processes append `JobEvent` lines (JSON, one per line) to ``JOB_DIR/events.jsonl``,
  never to stdout: stdout belongs to the candidate (and, in the server, to MCP).
- Every profiled call runs inside an NVTX start/end range in domain `NVTX_DOMAIN` whose
  message is `RunKey.range_name()` (with the judge's nonce of the call in a request job).
  extract.py attributes each kernel by parsing the range name back: identity, never
  position. In a request job ncu profiles every kernel but the untimed calls' (`u:`), and
  collectors/ranges.py reports kernels outside the timed ranges and ranges nobody issued.
- The parent trusts no statistic from the child: for ncu it reads values from the report;
  for events it takes raw per-run samples and refuses duplicates or missing runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from nsight_core.errors import ErrorClass
from nsight_core.request import ProfileRequest
from nsight_core.runtime.files import CONTESTANT_SOCKET as CONTESTANT_SOCKET
from nsight_core.runtime.files import MAX_REPLY_BYTES as MAX_REPLY_BYTES
from nsight_core.runtime.files import READY_FILE as READY_FILE
from nsight_core.runtime.files import READY_LINE as READY_LINE
from nsight_core.runtime.files import STANDBY_FILE as STANDBY_FILE
from nsight_core.runtime.files import STANDBY_SOCKET as STANDBY_SOCKET
from nsight_core.runtime.files import STDERR_FILE as STDERR_FILE
from nsight_core.runtime.files import STDOUT_FILE as STDOUT_FILE

NVTX_DOMAIN = "nspy"
"""Our own NVTX domain. A request job's contestant runs under ``--nvtx --nvtx-exclude
`NCU_NVTX_EXCLUDE```: ncu profiles every kernel but those of the harness's untimed calls;
an `@kernel` function job under ``--nvtx --nvtx-include `NCU_NVTX_INCLUDE```."""

NCU_NVTX_INCLUDE = f"regex:{NVTX_DOMAIN}@.+"
"""ncu's filter grammar is ``domain@range`` (start/end ranges carry no trailing '/'); with
``regex:`` each side is a regex. This is the form Nsight Python ships (``regex:nsight-python@.+``)
and that ncu 2025.3 was checked to accept; an empty range part is not."""

UNTIMED_PREFIX = "u:"
"""Range names of the harness's untimed calls (warm-up, checked calls, probes, imports)."""
HARNESS_PREFIX = "h:"
"""Range names of the harness's own work around a timed call (inputs in, output out): ncu
profiles it, and its kernels count for no run."""

NCU_NVTX_INCLUDE_TIMED = f"regex:{NVTX_DOMAIN}@^c[0-9]+:r[0-9]+:.*"
"""A request job under range replay, whose workloads are the included ranges: the timed
calls' ranges only, not the harness's ``u:`` and ``h:`` ones."""

NCU_NVTX_EXCLUDE = f"regex:{NVTX_DOMAIN}@^{UNTIMED_PREFIX}.*"
"""What ncu leaves out in a request job: kernels inside an untimed call's range. Everything
else is profiled, so work outside the timed ranges is in the report (collectors/ranges.py).
Anchored, so an annotation that contains 'u:' never hides a timed range."""

EVENTS_METRIC = "events__time_duration"
"""Metric name of the events backend: CUDA-event (GPU) or host-clock (CPU) time per call, ns."""

JOB_FILE = "job.json"
EVENTS_FILE = "events.jsonl"
REPORT_FILE = "report.ncu-rep"
NCU_LOG_FILE = "ncu.log"

JUDGE_DIR = "judge"
"""Subdirectory of a job for the judge's own stdout/stderr (the job's are the contestant's)."""

JOB_ARTIFACTS = {
    "events": EVENTS_FILE,
    "report": REPORT_FILE,
    "ncu_log": NCU_LOG_FILE,
    "stdout": STDOUT_FILE,
    "stderr": STDERR_FILE,
    "judge_stderr": f"{JUDGE_DIR}/{STDERR_FILE}",
}
"""Files a job may leave in its directory (name -> path in it); listed in a result's
artifacts when present. The pipeline and the store both read this one list."""

_RANGE_RE = re.compile(
    r"^c(?P<config>\d+):r(?P<run>\d+):(?:n(?P<nonce>[0-9a-f]{16}):)?(?P<annotation>.+)$",
    re.DOTALL,
)
NONCE_RE = re.compile(r"^[0-9a-f]{16}$")
"""A call's nonce as the judge draws it (``secrets.token_hex(8)``); range names carry it."""


@dataclass(frozen=True, order=True)
class RunKey:
    """Identity of one profiled call: which annotation, which config, which run."""

    annotation: str
    config_id: int
    run: int

    def range_name(self, nonce: str | None = None) -> str:
        """``c<config>:r<run>:<annotation>``; with the judge's nonce of the call
        ``c<config>:r<run>:n<nonce>:<annotation>``, so a range nobody issued is told apart
        (the `@kernel` API opens nonce-less ones). The annotation comes last so it may
        itself contain ':'."""
        if nonce is None:
            return f"c{self.config_id}:r{self.run}:{self.annotation}"
        if not NONCE_RE.match(nonce):
            raise ValueError(f"a range's nonce is 16 hex digits, got {nonce!r}")
        return f"c{self.config_id}:r{self.run}:n{nonce}:{self.annotation}"

    def harness_range_name(self, nonce: str) -> str:
        """The range of the harness's own work around this timed call (`HARNESS_PREFIX`)."""
        return HARNESS_PREFIX + self.range_name(nonce)

    @classmethod
    def from_range_name(cls, name: str) -> RunKey | None:
        parsed = parse_range_name(name)
        return None if parsed is None else parsed[0]


def parse_range_name(name: str) -> tuple[RunKey, str | None] | None:
    """The run and nonce a timed range's name carries (nonce None in a nonce-less name);
    None for any other name (a harness or untimed range, someone else's)."""
    m = _RANGE_RE.match(name)
    if m is None:
        return None
    return RunKey(m["annotation"], int(m["config"]), int(m["run"])), m["nonce"]


def untimed_range_name(annotation: str, config_id: int | None, nonce: str | None) -> str:
    """``u:c<config>:n<nonce>:<annotation>``: an untimed call's range, left out by ncu
    (`NCU_NVTX_EXCLUDE`); ``u:load:<what>`` for imports (no config, no nonce)."""
    if config_id is None or nonce is None:
        return f"{UNTIMED_PREFIX}load:{annotation}"
    return f"{UNTIMED_PREFIX}c{config_id}:n{nonce}:{annotation}"


class _Msg(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FunctionJob(_Msg):
    """The `@kernel` mode: call a cloudpickled function once per (config, run)."""

    pickle_file: str = Field(description="File (in the job dir) holding the cloudpickled function.")
    configs: list[dict[str, Any]] = Field(description="Bound arguments per config (args, kwargs).")
    runs: int = Field(ge=1)
    warmup: int = Field(ge=0)
    ignore_failures: bool = False


class LaunchSpec(_Msg):
    """What shapes a contestant's command line (the backend and ncu's flags) and its judge's
    slots: all a judge must know before its job. A pre-started judge takes only a job whose
    spec is equal (standby.py), and the backend wraps the contestant from it."""

    backend: str
    metrics: list[str]
    cache_control: str = "all"
    clock_control: str = "none"
    replay_mode: str = "kernel"
    diagnose: bool = False
    cuda_ipc: bool = True


class JobSpec(_Msg):
    """What a job's processes read from ``JOB_DIR/job.json``."""

    mode: Literal["request", "function"]
    backend: str = Field(description="A registered backend's name (collectors.get_backend).")
    request: ProfileRequest | None = None
    function: FunctionJob | None = None
    workdir: str = Field(description="Directory to chdir into and resolve relative paths against.")
    source_file: str | None = Field(None, description="Where the inline source was written.")
    reference_source_file: str | None = Field(None, description="Where the inline reference was.")
    seed: int = 0
    """Seeds the `@kernel` mode's RNGs; request jobs ignore it (the judge draws its own)."""
    child_timer: Literal["range", "clock", "cupti"] = "range"
    confine: Literal["on", "off"] = "off"
    """Confine the contestant's file access (decided by the job's plan: plan/job_plan.py)."""
    launch: LaunchSpec | None = None
    """A request job's contestant command settings, as its plan resolved them."""
    settings: dict[str, Any] | None = None
    """A request job's settings, as its plan resolved them (`JobSettings.wire`): the judge
    reads these, never a second derivation from the request."""
    time_limit_s: float = Field(600.0, gt=0)
    """The contestant's limit, as the plan resolved it (the judge arms it; the server gives
    the judge this plus a grace to report how the contestant ended)."""

    def write(self, job_dir: Path) -> Path:
        path = job_dir / JOB_FILE
        path.write_text(self.model_dump_json(indent=1))
        return path


Phase = Literal["import", "check", "warmup", "profile"]


class PhaseEvent(_Msg):
    type: Literal["phase"] = "phase"
    phase: Phase
    state: Literal["start", "end"]
    t: float = Field(description="time.monotonic() in the worker")


class ProgressEvent(_Msg):
    type: Literal["progress"] = "progress"
    phase: Phase
    annotation: str | None = None
    config_id: int | None = None
    run: int | None = None
    done: int
    total: int


class CheckEvent(_Msg):
    """Correctness of one candidate on one config (all seeds)."""

    type: Literal["check"] = "check"
    annotation: str
    config_id: int
    passed: bool
    seeds: int
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    mismatch_count: int | None = None
    first_bad_index: list[int] | None = None
    reasons: list[str] = Field(default_factory=list)
    error_class: ErrorClass | None = None
    message: str | None = None


class FailureEvent(_Msg):
    """A callable failed; run or config may be None when the failure covers all of them."""

    type: Literal["failure"] = "failure"
    annotation: str
    config_id: int | None = None
    run: int | None = None
    phase: Phase
    error_class: ErrorClass
    message: str
    hint: str = ""  # what to change, where the judge knows it (a call's limit, an end)
    traceback: str = ""
    file: str | None = None
    line: int | None = None


class RangeEvent(_Msg):
    """An annotated call ran (whether or not it launched kernels): the parent expects its key."""

    type: Literal["range"] = "range"
    annotation: str
    config_id: int
    run: int
    ok: bool = Field(description="False when the call raised (a FailureEvent says why).")


class SampleEvent(_Msg):
    """One raw timing sample (events/cupti backends); ncu values come from the report instead."""

    type: Literal["sample"] = "sample"
    annotation: str
    config_id: int
    run: int
    metric: str
    value: float
    unit: str
    kernel: str | None = None
    launch: str | None = Field(None, description="A kernel's '<<<grid, block>>>' (cupti).")

    @classmethod
    def of(cls, key: RunKey, metric: str, ns: float, kernel: str | None = None) -> SampleEvent:
        """A time in ns of the call ``key`` (of one kernel of it when ``kernel`` is given)."""
        return cls(
            annotation=key.annotation,
            config_id=key.config_id,
            run=key.run,
            metric=metric,
            value=ns,
            unit="ns",
            kernel=kernel,
        )


class DoneEvent(_Msg):
    type: Literal["done"] = "done"
    phase_seconds: dict[str, float]
    device: str | None = Field(None, description="'cuda:0 (NVIDIA H200)' or 'cpu'")
    confined: bool | None = Field(None, description="Contestant's files confined (request jobs).")
    notes: list[str] = Field(default_factory=list)


# -- judge <-> contestant ----------------------------------------------------------------
#
# The judge (trusted, never imports candidate code) and the contestant (imports and calls
# the candidates) talk over a Unix socket, one JSON message per line. The judge may send
# pickled objects (the contestant is free to trust the judge); the contestant's replies are
# plain JSON that the judge validates with these models: it never unpickles anything the
# contestant wrote. Array data crosses in shared slots (CUDA IPC or host shared memory).

RELEASE_FD_ENV = "NSPY_RELEASE_FD"
"""A pre-started judge's pipe to its pool: once the job's events are complete (DoneEvent
written, file closed) the judge writes its exit code there, and the pool may hand the result
on while the judge's process is still ending (standby.py)."""


class ArrayNode(_Msg):
    kind: Literal["array"] = "array"
    framework: Literal["torch", "numpy", "cupy"]
    type_name: str
    dtype: str
    shape: list[int]
    stride: list[int] | None = None
    """Element strides to recreate (None: contiguous)."""
    device: str
    slot: int | None = None
    """Where the bytes are; None when the array did not fit any slot (a mismatch)."""
    nbytes: int
    requires_grad: bool = False


class ValueNode(_Msg):
    kind: Literal["value"] = "value"
    type_name: str
    value: bool | int | float | str | None = None
    special: str | None = Field(None, description="'nan', 'inf' or '-inf' for such floats")


class PickleNode(_Msg):
    """Judge -> contestant only: an argument of no array or plain type."""

    kind: Literal["pickle"] = "pickle"
    data: str


class OpaqueNode(_Msg):
    """Contestant -> judge: an output object that cannot cross (it is compared by type)."""

    kind: Literal["opaque"] = "opaque"
    type_name: str


class SeqNode(_Msg):
    kind: Literal["tuple", "list"]
    type_name: str
    items: list[Node]


class DictNode(_Msg):
    kind: Literal["dict"] = "dict"
    type_name: str
    keys: list[str]
    items: list[Node]


Node = Annotated[
    ArrayNode | ValueNode | PickleNode | OpaqueNode | SeqNode | DictNode,
    Field(discriminator="kind"),
]
SeqNode.model_rebuild()
DictNode.model_rebuild()


class SlotSpec(_Msg):
    """Shared memory the judge owns: CUDA IPC (pickled torch handle) or a host file."""

    slot: int
    where: Literal["cuda", "host"]
    nbytes: int
    handle: str


class ContestantJob(_Msg):
    """The judge's first line to the contestant, which started before there was a job: what
    to import and how to confine itself; no seed, no run plan."""

    annotations: list[str]
    workdir: str
    source_file: str | None = None
    reference_source_file: str | None = None
    """The trusted inline source the reference's bare name resolves in, if any."""
    child_timer: Literal["range", "clock", "cupti"]
    check_mutation: bool = True
    check_aliasing: bool = True
    confine: Literal["on", "off"] = "off"
    """Confine the contestant's files (Landlock): workdir, its own, slots, Python and CUDA."""
    read_dirs: list[str] = Field(default_factory=list)
    write_dirs: list[str] = Field(default_factory=list)


class CallMsg(_Msg):
    type: Literal["call"] = "call"
    nonce: str
    annotation: str
    config_id: int
    run: int | None = Field(description="Run index of a timed call; None for untimed calls.")
    new_slots: list[SlotSpec] = Field(default_factory=list)
    inputs: Node
    out_slots: list[int] = Field(default_factory=list)
    want_output: bool = True
    mask: str | None = None
    """Hex of the 8 bytes the input slots hold XORed until the call (`Backend.masks_inputs`)."""


class ExitMsg(_Msg):
    type: Literal["exit"] = "exit"


class LoadMsg(_Msg):
    """Import the candidates now. The contestant starts with the reference alone, and the
    judge sends this once every call of the reference is done, so no candidate code exists
    in the process while the reference runs (a candidate's thread or stream could otherwise
    add kernels to the reference's ranges). The reply is a second HelloMsg."""

    type: Literal["load"] = "load"


JudgeMsg = Annotated[CallMsg | ExitMsg | LoadMsg, Field(discriminator="type")]


class HelloMsg(_Msg):
    type: Literal["hello"] = "hello"
    loaded: list[str]
    failures: list[FailureEvent] = Field(default_factory=list)
    integrity: list[str] = Field(default_factory=list)
    shadowed: list[str] = Field(default_factory=list)
    confined: bool = False
    notes: list[str] = Field(default_factory=list)
    host_s: dict[str, float] = Field(default_factory=dict)
    """Where the contestant's start-up went (seconds): for benchmarks, never for verdicts."""
    primed: bool = False
    """The contestant ran the prime under ncu (runtime/early_cuda.py). The judge reads it from
    the first hello only, which comes before any candidate is imported."""


class KernelTiming(_Msg):
    """One kernel of a timed call under the cupti timer (device clock, ns)."""

    name: str = Field(description="Function name, as ncu's Kernel column shows it.")
    start_ns: int
    end_ns: int
    stream: int
    launch: str = Field("", description="'<<<grid, block>>>'; a copy's bytes ('4096 B x2').")
    kind: Literal["kernel", "copy"] = Field("kernel", description="'copy': untimed memcpy/memset.")


class ReplyMsg(_Msg):
    type: Literal["reply"] = "reply"
    nonce: str
    ok: bool
    output: Node | None = None
    ns: float | None = None
    """In-process time of the call (clock timer; host-inclusive for cupti)."""
    kernels: list[KernelTiming] = Field(
        default_factory=list, description="The call's kernels (cupti timer), in start order."
    )
    failure: FailureEvent | None = None
    reasons: list[str] = Field(default_factory=list)
    """Structural findings of the contestant's harness (mutated or aliased inputs)."""
    outside: list[str] = Field(default_factory=list)
    """cupti timer: kernels another thread launched since the previous timed call."""
    after_ns: float | None = None
    """Clock timer: work seen after the window beyond an honest call's (collectors/late.py)."""
    after_parts: dict[str, float] | None = None
    """``after_ns`` by where it ran (`window_guard.AFTER_PARTS`), to word the Reason."""
    latency_ns: float | None = None
    """Clock timer: the call's host-inclusive latency, where ``ns`` is its GPU window."""
    integrity: list[str] = Field(default_factory=list)
    """Harness functions or framework attributes found changed since start-up."""
    notes: list[str] = Field(default_factory=list)
    """What the call left set that the harness undoes (a persisting-L2 limit): Reasons."""
    device: str | None = None
    host_s: dict[str, float] = Field(default_factory=dict)
    """Where the call's host time went (seconds): for benchmarks, never for verdicts."""


ContestantMsg = Annotated[HelloMsg | ReplyMsg, Field(discriminator="type")]


class SuspectEvent(_Msg):
    """The judge found something that makes in-process numbers or a candidate suspicious."""

    type: Literal["suspect"] = "suspect"
    annotation: str | None = Field(None, description="None: it concerns every row of the job.")
    reason: str
    in_process_only: bool = Field(
        False, description="True when only in-process timings are affected (a patched timer)."
    )
    verdict: bool = Field(True, description="False: named in Reasons, Trust unchanged.")


class EndEvent(_Msg):
    """How the contestant's process ended, as the judge saw it (with the backend's reading)."""

    type: Literal["end"] = "end"
    error_class: ErrorClass | None = None
    message: str = ""
    hint: str = ""
    exit_code: int | None = None
    signal: str | None = None
    command: list[str] = Field(default_factory=list)
    tool_version: str | None = None
    wall_s: float = 0.0


class FloorEvent(_Msg):
    """The bytes one config's call moves at least, as the judge measured them.

    Sent once per config, from the first reference output: the parent turns it into a
    physical floor (diagnose.py) on every backend.
    """

    type: Literal["floor"] = "floor"
    config_id: int
    bytes_in: int | None = Field(None, description="Bytes of every array among the inputs.")
    bytes_out: int | None = Field(None, description="Bytes of every array in the output.")


class GpuStateEvent(_Msg):
    """The job's GPU as the judge read it (NVML) right before one timed call went out and
    right after its reply came back: each list holds [start, end] (judge/gpu_state.py)."""

    type: Literal["gpu_state"] = "gpu_state"
    annotation: str
    config_id: int
    run: int
    sm_mhz: list[int | None] = Field(description="SM clock (MHz); null: that read failed.")
    temp_c: list[int | None]
    reasons: list[list[str]] = Field(description="NVML clock-event reasons active then.")


JobEvent = (
    PhaseEvent
    | ProgressEvent
    | CheckEvent
    | FailureEvent
    | RangeEvent
    | SampleEvent
    | DoneEvent
    | SuspectEvent
    | EndEvent
    | FloorEvent
    | GpuStateEvent
)
