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
- The judge and the contestant talk to each other over a socket, in the messages of
  runtime/messages.py; the parent never reads those.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from nsight_core.errors import ErrorClass
from nsight_core.request import ProfileRequest
from nsight_core.runtime.callable_spec import ResolvedSpec
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
    callables: dict[str, ResolvedSpec] = Field(default_factory=dict)
    """A request job's callables (reference, input maker, candidates) by spec, as its plan
    resolved them: the judge and the contestant import these and derive no file again."""
    seed: int = 0
    """Seeds the `@kernel` mode's RNGs; request jobs ignore it (the judge draws its own)."""
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


RELEASE_FD_ENV = "NSPY_RELEASE_FD"
"""A pre-started judge's pipe to its pool: once the job's events are complete (DoneEvent
written, file closed) the judge writes its exit code there, and the pool may hand the result
on while the judge's process is still ending (standby.py)."""


class KernelTiming(_Msg):
    """One kernel of a timed call under the cupti timer (device clock, ns): the contestant
    sends them in its reply (runtime/messages.py), the judge turns them into samples."""

    name: str = Field(description="Function name, as ncu's Kernel column shows it.")
    start_ns: int
    end_ns: int
    stream: int
    launch: str = Field("", description="'<<<grid, block>>>'; a copy's bytes ('4096 B x2').")
    kind: Literal["kernel", "copy"] = Field("kernel", description="'copy': untimed memcpy/memset.")


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
