"""The judge's side of the contestant's socket: its hellos, and the round trip of each call
(encode the inputs into slots, send, read the reply, decode the output), with what every
message says of candidate code (suspects, notes, the contestant's own time).

Runs in the trusted judge process, like everything in judge/: it reads what the untrusted
contestant sends, and never runs it.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter

from nsight_core.collectors.base import Backend
from nsight_core.collectors.events import sync_all
from nsight_core.collectors.ranges import IssuedCall
from nsight_core.collectors.timers import tampering_affects
from nsight_core.judge.account import Account
from nsight_core.judge.call_limit import CallLimit
from nsight_core.judge.gpu_state import GpuSampler
from nsight_core.processes.in_flight import InFlight
from nsight_core.processes.launch import Channel, ContestantProcess
from nsight_core.processes.seat import Seat
from nsight_core.protocol import RunKey, SuspectEvent
from nsight_core.request import ProfileRequest
from nsight_core.runtime.check import inputs_differ
from nsight_core.runtime.messages import (
    CallMsg,
    ContestantMsg,
    HelloMsg,
    LoadMsg,
    ReplyMsg,
    SlotSpec,
)

_REPLY = TypeAdapter[ContestantMsg](ContestantMsg)

Inputs = tuple[tuple[Any, ...], dict[str, Any]]

HOST_S_KEYS = 12
"""The most keys of a contestant's start-up account kept per hello: a contestant with
candidate code in it could send any number."""


@dataclass(frozen=True)
class Undecodable:
    """An output the judge could not rebuild from its slots, and why."""

    why: str


class Calls:
    """The round trip with the contestant seated on ``seat``, and what it learned so far."""

    def __init__(
        self,
        seat: Seat,
        req: ProfileRequest,
        account: Account,
        gpu: GpuSampler,
        in_flight: InFlight,
    ) -> None:
        self.req = req
        self.account = account
        self.events = account.events
        self.backend: Backend = seat.backend
        self.arena = seat.arena
        self._proc: ContestantProcess = seat.proc
        self._chan: Channel = seat.chan
        self._gpu = gpu
        self.loaded: list[str] = []
        self.device: str | None = None
        self._suspects: set[str] = set()
        self.confined = False
        self.current: tuple[str, int | None, int | None] = ("<contestant>", None, None)
        self.issued: list[IssuedCall] = []
        """Every call sent, in order, with its nonce: read with an ncu report (ranges.py)."""
        self.primed = False
        """The contestant's first hello said it ran the prime: its report's first result."""
        self._limit = CallLimit(seat.deadline)
        self._in_flight = in_flight
        self.call_limit_s = 0.0
        self.call_limit_why = ""
        """The limit of the candidate call in flight, and how it was chosen (call_limit.py)."""

    def hello(self) -> None:
        """The contestant's start: it has imported the reference, and nothing else."""
        self.primed = self._take_hello().primed

    def load_candidates(self) -> None:
        """After the reference's last call: the contestant imports the candidates."""
        # A crash while importing them is no call of the reference's.
        self.current = ("<contestant>", None, None)
        self._chan.send(LoadMsg().model_dump_json().encode())
        self._take_hello()

    def _take_hello(self) -> HelloMsg:
        msg = self._read()
        if not isinstance(msg, HelloMsg):
            raise ValueError("the contestant answered with a call reply where a hello was due")
        for f in msg.failures:
            self.events.emit(f)
        self.loaded += [a for a in self.req.annotations if a in msg.loaded and a not in self.loaded]
        for what in msg.integrity:
            self.suspect(None, f"candidate code rebound {what}", what)
        for what in msg.shadowed:
            self.suspect(None, f"{what}; the harness imported the real one first", "")
        self.confined = msg.confined
        self.account.notes += [n for n in msg.notes if n not in self.account.notes]
        self._add_host_s(msg.host_s)
        return msg

    def _add_host_s(self, host_s: dict[str, float]) -> None:
        """The contestant's own account of its time, kept apart ("contestant." keys) for the
        benchmarks: it comes from candidate code's process, so no verdict reads it."""
        for k, v in list(host_s.items())[:HOST_S_KEYS]:
            if isinstance(v, float) and 0.0 <= v < 1e6:
                key = f"contestant.{k[:32]}"
                self.account.phase_seconds[key] = round(
                    self.account.phase_seconds.get(key, 0.0) + v, 4
                )

    def suspect(self, annotation: str | None, reason: str, what: str) -> None:
        if reason in self._suspects:
            return
        self._suspects.add(reason)
        # The backend's timer says whether the rebinding touches its numbers (a patched
        # host clock leaves cupti's and ncu's standing), and those rows only.
        affects = tampering_affects(self.backend, what) if what else "all"
        if affects == "none":
            self.account.notes.append(
                f"{reason}: not on this backend's timing path; its rows stand"
            )
            return
        in_process = affects == "timer" and self.backend.evidence == "in_process"
        targets: list[str | None] = [annotation]
        if annotation is None and what and len(self.loaded) > 1:
            # Seen once candidates exist: every call of the reference was made before.
            targets = [a for a in self.loaded if a != self.req.reference]
        for target in targets:
            self.events.emit(
                SuspectEvent(annotation=target, reason=reason, in_process_only=in_process)
            )

    def _name(self, annotation: str, notes: list[str]) -> None:
        """What a call left set that the harness undid: named in its rows, no verdict."""
        for note in notes[:4]:
            if note not in self._suspects:  # once per job
                self._suspects.add(note)
                self.events.emit(SuspectEvent(annotation=annotation, reason=note, verdict=False))

    def _read(self, deadline: float | None = None) -> HelloMsg | ReplyMsg:
        assert self._chan is not None and self._proc is not None
        line = self._chan.recv_line(self._proc.alive, deadline)
        return _REPLY.validate_json(line)

    def call(
        self,
        ann: str,
        cid: int,
        run: int | None,
        inputs: Inputs,
        expected: Any,
    ) -> tuple[ReplyMsg, Any]:
        """Send one call; the reply and the rebuilt output (None when it failed)."""
        assert self._chan is not None and self._proc is not None
        self.current = (ann, cid, run)
        t0 = time.perf_counter()
        new: list[SlotSpec] = []
        mask = secrets.token_bytes(8) if self.backend.masks_inputs else None
        node = self.arena.encode_inputs(inputs, f"c{cid}", new, mask)
        check = self.req.check.enabled
        out_slots = self.arena.output_slots(expected, f"c{cid}", new) if check else []
        sync_all()
        nonce = secrets.token_hex(8)
        self.issued.append(IssuedCall(nonce, ann, cid, run))
        msg = CallMsg(
            nonce=nonce,
            annotation=ann,
            config_id=cid,
            run=run,
            new_slots=new,
            inputs=node,
            out_slots=out_slots,
            want_output=check,
            mask=mask.hex() if mask is not None else None,
        )
        self.account.judge_s += time.perf_counter() - t0
        if run is not None:
            self._gpu.start(RunKey(ann, cid, run), self.device)
        deadline = self._deadline_for(ann)
        self._in_flight.mark(ann, cid, run)
        self._chan.send(msg.model_dump_json().encode())
        t_sent = time.monotonic()
        while True:
            reply = self._read(deadline)
            if isinstance(reply, ReplyMsg) and reply.nonce == nonce:
                break
            self.suspect(
                ann,
                "the contestant sent a message nobody asked for (a forged or replayed "
                "report); in-process numbers of this job are not trustworthy",
                "nsight_core.protocol",
            )
        rt = round(time.monotonic() - t_sent, 4)
        if ann == self.req.reference:
            self._limit.note_reference(rt)
        self._gpu.stop()
        self.account.phase_seconds["roundtrips"] = round(
            self.account.phase_seconds.get("roundtrips", 0.0) + rt, 4
        )
        self._add_host_s(reply.host_s)
        if reply.device:
            self.device = reply.device
        for what in reply.integrity:
            self.suspect(None, f"candidate code rebound {what} (seen after {ann!r})", what)
        if reply.outside:
            self.suspect(
                ann,
                "another thread launched kernels between timed calls "
                f"({', '.join(reply.outside[:3])}): work outside any call's range, a thread or "
                "stream left running, which also lands in calls' windows; its in-process "
                "times are not this candidate's alone",
                "",
            )
        self._name(ann, reply.notes)
        if not reply.ok or reply.output is None:
            return reply, None
        t1 = time.perf_counter()
        try:
            actual = self.arena.decode_output(reply.output, set(out_slots))
        except ValueError as exc:
            actual = Undecodable(str(exc))
        if check and self.req.check.check_mutation:
            # Decided here, from what the input slots hold after the call, not from the
            # contestant's report (which candidate code in its process could rebind).
            seen = inputs_differ(inputs, self.arena.read_inputs(node, inputs))
            if seen:
                mine = [f"mutated input {name} (seen in the judge's slot)" for name in seen]
                reply = reply.model_copy(update={"reasons": [*reply.reasons, *mine]})
        sync_all()
        self.account.judge_s += time.perf_counter() - t1
        return reply, actual

    def _deadline_for(self, ann: str) -> float | None:
        """When ``ann``'s call must have answered: a candidate's own limit (call_limit.py);
        None for the trusted reference, which has the job's limit alone."""
        if ann == self.req.reference:
            return None
        self.call_limit_s, self.call_limit_why = self._limit.for_candidate()
        return time.monotonic() + self.call_limit_s
