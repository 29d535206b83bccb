"""The judge <-> contestant messages: one JSON line each over the contestant's socket.

The judge (trusted, never imports candidate code) and the contestant (imports and calls the
candidates) talk over a Unix socket, one JSON message per line. The judge may send pickled
objects (the contestant is free to trust the judge); the contestant's replies are plain JSON
that the judge validates with these models: it never unpickles anything the contestant
wrote. Array data crosses in shared slots (CUDA IPC or host shared memory: exchange.py), and
a node tree describes an argument or an output around them. What either side reports to the
parent goes to ``events.jsonl`` in protocol.py's events instead.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from nsight_core.protocol import FailureEvent, KernelTiming
from nsight_core.runtime.callable_spec import ResolvedSpec


class _Msg(BaseModel):
    model_config = ConfigDict(extra="forbid")


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
    callables: dict[str, ResolvedSpec]
    """Each annotation's callable, as the job's plan resolved it (protocol.JobSpec)."""
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
