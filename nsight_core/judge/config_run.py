"""One config's calls, as the judge makes them: the untimed calls, the timed runs, the
repeats and decoys (probes.py) and regime calls (regimes.py) among them, each call checked
against the reference's output on the same inputs, and the config's verdicts and held-back
timed events reported once its calls are done.

Runs in the trusted judge process, like everything in judge/: it runs the reference and the
input maker, never a candidate (calls.py sends those calls to the contestant).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nsight_core.collectors.events import sync_all
from nsight_core.errors import ErrorClass
from nsight_core.judge.account import Account
from nsight_core.judge.calls import Calls, Inputs, Undecodable
from nsight_core.judge.discrimination import BLIND_PAIRS, Discrimination, replay_passes
from nsight_core.judge.gpu_state import GpuSampler
from nsight_core.judge.probes import DECOY_ATTEMPTS, Extra, ProbePlan, draw_plan, make_decoy
from nsight_core.judge.regimes import (
    ConfigRegimes,
    Nominal,
    Regime,
    RegimeCheck,
    RegimePlan,
    nominal_of,
)
from nsight_core.judge.regimes import applies as regimes_apply
from nsight_core.judge.verdict import (
    Tally,
    TrivialBound,
    judge_output,
    trivial_bound,
    type_mismatch,
)
from nsight_core.protocol import (
    CheckEvent,
    FailureEvent,
    FloorEvent,
    GpuStateEvent,
    ProgressEvent,
    RangeEvent,
    RunKey,
    SampleEvent,
)
from nsight_core.request import ProfileRequest
from nsight_core.runtime.check import clone_args, same_result
from nsight_core.runtime.leaves import nbytes_of
from nsight_core.runtime.messages import ReplyMsg
from nsight_core.runtime.process import failure_event, seed_all
from nsight_core.settings import JobSettings


@dataclass
class _ConfigState:
    """One config's calls so far: verdicts, failures, and timed events held back until the
    candidate has passed every check of the config."""

    cid: int
    config: dict[str, Any]
    anns: list[str]
    alive: set[str] = field(default_factory=set)
    tallies: dict[str, Tally] = field(default_factory=dict)
    errors: dict[str, FailureEvent] = field(default_factory=dict)
    pending: dict[str, list[RangeEvent | SampleEvent | FailureEvent | GpuStateEvent]] = field(
        default_factory=dict
    )
    bound: TrivialBound | None = None
    bound_known: bool = False
    probes: dict[str, ProbePlan] = field(default_factory=dict)
    """Per annotation, its repeats and decoys (`_probe_plan`, judge/probes.py)."""
    draw: Inputs | None = None
    """A fresh draw of the config's inputs that decoys take their changed values from."""
    regimes: ConfigRegimes | None = None
    """The candidates' calls on inputs beyond the nominal regime (judge/regimes.py)."""
    after: dict[str, list[tuple[float | None, float | None]]] = field(default_factory=dict)
    """Per annotation, each timed call's (time, work after its window), for `late_work`."""
    after_parts: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    """Per annotation, each timed call's work after its window by where it ran (to word the
    Reason), where its timer reported it."""

    def __post_init__(self) -> None:
        self.alive = set(self.anns)
        self.tallies = {a: Tally() for a in self.anns}
        self.pending = {a: [] for a in self.anns}


class _ReferenceFailed(Exception):
    def __init__(self, failure: FailureEvent) -> None:
        super().__init__(failure.message)
        self.failure = failure


class ConfigRunner:
    """The job's configs, one at a time: what one config's calls need of the job, and what
    the job's configs share (each config's bound, magnitudes and whether its check can tell
    work from no work, kept from the reference's pass for the candidates')."""

    def __init__(
        self,
        req: ProfileRequest,
        settings: JobSettings,
        calls: Calls,
        account: Account,
        gpu: GpuSampler,
        rng: random.Random,
    ) -> None:
        self.req = req
        self.settings = settings
        self.calls = calls
        self.account = account
        self.events = account.events
        self.backend = calls.backend
        self._gpu = gpu
        self._rng = rng
        self.ref: Callable[..., Any] | None = None
        self.maker: Callable[..., Any] | None = None
        self._bounds: dict[int, TrivialBound | None] = {}
        """Per config, the trivial-answer bound of its first expected output (both passes)."""
        self._nominals: dict[int, Nominal] = {}
        """Per config, its first expected output's magnitudes, for the regimes' tolerances."""
        self._asked: dict[int, Discrimination] = {}
        self._blind: dict[int, str] = {}
        """Per config, whether its check can tell work from no work (discrimination.py),
        asked on fresh expected outputs in both passes; the reason where it cannot."""

    def make_inputs(self, config: dict[str, Any]) -> Inputs:
        assert self.maker is not None
        seed_all(self._rng.getrandbits(63))
        made = self.maker(**config)
        if isinstance(made, dict):
            return (), dict(made)
        if isinstance(made, tuple):
            return made, {}
        return (made,), {}

    def run_config(
        self, cid: int, config: dict[str, Any], anns: list[str], done: list[int], total: int
    ) -> bool:
        """All calls of ``anns`` on one config; False when the reference itself (the judge's
        run of it, or the input maker) failed on it."""
        st = _ConfigState(cid, config, [a for a in anns if a in self.calls.loaded])
        st.bound_known, st.bound = cid in self._bounds, self._bounds.get(cid)
        untimed = self.untimed_calls
        try:
            with self.account.phase("check"):
                for _ in range(untimed):
                    for ann in st.anns:
                        if ann in st.alive:
                            self._one(st, ann, None)
                        done[0] += 1
                    self.events.emit(
                        ProgressEvent(phase="check", config_id=cid, done=done[0], total=total)
                    )
            with self.account.phase("profile"):
                for run in range(self.req.runs):
                    for ann in [a for a in st.anns if a in st.alive]:
                        self._one(st, ann, run)
                        done[0] += 1
                        self.events.emit(
                            ProgressEvent(
                                phase="profile",
                                annotation=ann,
                                config_id=cid,
                                run=run,
                                done=done[0],
                                total=total,
                            )
                        )
            self._after_timed_runs(st)
        except _ReferenceFailed as exc:
            self.events.emit(exc.failure)
            return False
        finally:
            self._report_config(st)
        return True

    def _after_timed_runs(self, st: _ConfigState) -> None:
        """The untimed extras and regime calls due after every annotation's last timed run."""
        regimes = st.regimes.plans if st.regimes is not None else {}
        if not any(p.post for p in st.probes.values()) and not any(
            p.post for p in regimes.values()
        ):
            return
        with self.account.phase("check"):
            for ann, plan in st.probes.items():
                for extra in list(plan.post):
                    self._extra(st, ann, plan, extra)
            for ann, due in regimes.items():
                for regime in due.post:
                    self._regime(st, ann, regime)

    @property
    def untimed_calls(self) -> int:
        """Calls per annotation and config before the timed runs: the warm-up, plus only as
        many extra checked calls as the timed runs leave short of `check.seeds` (every timed
        output is checked too). Each untimed call is a round trip that ncu intercepts, and
        they were a tenth of the softmax bench's wall time."""
        spec = self.req.check
        short = spec.seeds - self.req.runs if spec.enabled else 0
        return max(self.req.warmup, short, 1)

    def _expect(self, st: _ConfigState, inputs: Inputs) -> Any:
        """The reference's output on a copy of fresh ``inputs`` (None when checks are off);
        the config's first also sets its trivial-answer bound and floor, and each feeds
        the question whether the check can tell work from no work (discrimination.py)."""
        spec = self.req.check
        if not spec.enabled:
            return None
        t0 = time.perf_counter()
        out = self._reference_output(inputs)
        if not st.bound_known:
            st.bound = self._bounds[st.cid] = trivial_bound(out, inputs, spec.atol, spec.rtol)
            st.bound_known = True
            if spec.regimes:
                self._nominals[st.cid] = nominal_of(out)
            # The physical floor: bytes in and out, once per config.
            self.events.emit(
                FloorEvent(config_id=st.cid, bytes_in=nbytes_of(inputs), bytes_out=nbytes_of(out))
            )
        asked = self._asked.setdefault(
            st.cid, Discrimination(st.cid, min(BLIND_PAIRS, self.untimed_calls + self.req.runs - 1))
        )
        blind = asked.feed(out, inputs, atol=spec.atol, rtol=spec.rtol, bound=st.bound)
        if blind is not None:
            self._blind[st.cid] = blind  # every passed check on the config carries it
        self.account.judge_s += time.perf_counter() - t0
        return out

    def _reference_output(self, inputs: Inputs) -> Any:
        assert self.ref is not None
        args, kwargs = clone_args(inputs)
        out = self.ref(*args, **kwargs)
        sync_all()
        return out

    def _one(self, st: _ConfigState, ann: str, run: int | None) -> None:
        """One fresh call of ``ann`` (timed when ``run`` is given), then the untimed
        repeats and decoys its plan puts right after it (judge/probes.py), and the regime
        calls (judge/regimes.py)."""
        plan = self._probe_plan(st, ann)
        regimes = self._regime_plan(st, ann)
        try:
            inputs = self.make_inputs(st.config)
            expected = self._expect(st, inputs)
        except Exception as exc:
            failure = failure_event(self.req.reference, "check", exc, config_id=st.cid)
            raise _ReferenceFailed(failure) from exc
        actual = self._checked_call(st, ann, run, inputs, expected)
        if plan is not None:
            plan.fresh += 1
            if plan.fresh in plan.sources and ann in st.alive:
                plan.kept[plan.fresh] = (inputs, actual)
            for extra in list(plan.after.get(plan.fresh, [])):
                self._extra(st, ann, plan, extra)
        if regimes is not None:
            for regime in regimes.next_fresh():
                self._regime(st, ann, regime)

    def _extra(self, st: _ConfigState, ann: str, plan: ProbePlan, extra: Extra) -> None:
        """One untimed repeat (the earlier output, which passed, stands in for the expected
        one, and must come again bit for bit) or decoy of an earlier fresh call."""
        kept = plan.kept.get(extra.source)
        plan.done_with(extra)
        if kept is None or ann not in st.alive or not st.tallies[ann].passed:
            return
        inputs, earlier = kept
        if not extra.decoy:
            self._checked_call(st, ann, None, inputs, earlier, earlier)
            return
        spec = self.req.check
        t0 = time.perf_counter()
        try:
            if st.draw is None:
                st.draw = self.make_inputs(st.config)
            made = make_decoy(
                inputs,
                earlier,
                draw=st.draw,
                expect=self._reference_output,
                replay_passes=lambda e, o: replay_passes(
                    e, o, atol=spec.atol, rtol=spec.rtol, bound=st.bound
                ),
                rng=self._rng,
                # Where any earlier answer passes (a blind check), changing more is no use.
                attempts=1 if st.cid in self._blind else DECOY_ATTEMPTS,
            )
            self.account.judge_s += time.perf_counter() - t0
            if made is None:  # no decoy of these inputs: a fresh call in its place
                fresh = self.make_inputs(st.config)
                made = fresh, self._expect(st, fresh)
        except Exception as exc:
            failure = failure_event(self.req.reference, "check", exc, config_id=st.cid)
            raise _ReferenceFailed(failure) from exc
        self._checked_call(st, ann, None, *made)

    def _checked_call(
        self,
        st: _ConfigState,
        ann: str,
        run: int | None,
        inputs: Inputs,
        expected: Any,
        same_as: Any = None,
        regime: RegimeCheck | None = None,
    ) -> Any:
        """The call, its verdict (and, for a repeat, ``same_as``: the output it must give
        again; for a regime call, ``regime``: its tolerance, and the name its failures
        carry), its timed events; its output, or None when it failed."""
        reply, actual = self.calls.call(ann, st.cid, run, inputs, expected)
        if not reply.ok:
            failure = reply.failure or FailureEvent(
                annotation=ann,
                phase="profile" if run is not None else "check",
                error_class=ErrorClass.RUNTIME_ERROR,
                message="the call failed without a report",
            )
            if run is None:
                named = regime.label(failure.message) if regime is not None else failure.message
                st.errors[ann] = failure.model_copy(
                    update={"phase": "check", "config_id": st.cid, "message": named}
                )
                st.alive.discard(ann)
            else:
                st.pending[ann] += [
                    RangeEvent(annotation=ann, config_id=st.cid, run=run, ok=False),
                    failure,
                ]
            return None
        if self.req.check.enabled:
            tally = st.tallies[ann]
            if regime is None:
                self._judge(tally, expected, reply, actual, st.bound, inputs)
            else:
                sub = Tally()
                self._judge(sub, expected, reply, actual, st.bound, inputs, by=regime.judge)
                regime.fold(tally, sub)
            if same_as is not None and tally.passed:
                t0 = time.perf_counter()
                if not same_result(same_as, actual).passed:
                    tally.fail("nondeterministic: two calls on the same inputs differ")
                self.account.judge_s += time.perf_counter() - t0
            if not tally.passed:
                st.alive.discard(ann)
                return None
        if run is not None:
            st.pending[ann].append(RangeEvent(annotation=ann, config_id=st.cid, run=run, ok=True))
            key = RunKey(ann, st.cid, run)
            st.pending[ann] += self.backend.call_samples(
                key, reply.ns, reply.kernels, self.settings, latency_ns=reply.latency_ns
            )
            st.after.setdefault(ann, []).append((reply.ns, reply.after_ns))
            if reply.after_parts is not None:
                st.after_parts.setdefault(ann, []).append(reply.after_parts)
            st.pending[ann] += self._gpu.take(key)
        return actual

    def _regime_plan(self, st: _ConfigState, ann: str) -> RegimePlan | None:
        """``ann``'s regime calls on this config, drawn on its first call (regimes.py); None
        for the reference, where they are off, on a config whose check cannot discriminate
        (its verdict says so already) and where a GPU MODE task's check judges."""
        spec = self.req.check
        nominal = self._nominals.get(st.cid)
        if (
            not (spec.enabled and spec.regimes)
            or ann == self.req.reference
            or nominal is None
            or st.cid in self._blind
            or not regimes_apply()
        ):
            return None
        if st.regimes is None:
            st.regimes = ConfigRegimes(st.cid, nominal)
        return st.regimes.plan(ann, self._rng, self.untimed_calls)

    def _regime(self, st: _ConfigState, ann: str, regime: Regime) -> None:
        """One untimed call of ``ann`` on a fresh draw of the inputs in ``regime``, checked
        against the reference's output on them; none where the regime changes no input or
        the reference does not allow it (then the job's notes say so, once)."""
        rs = st.regimes
        if rs is None or ann not in st.alive or not st.tallies[ann].passed:
            return
        if regime.name in rs.refused:
            return
        t0 = time.perf_counter()
        try:
            if st.draw is None:
                st.draw = self.make_inputs(st.config)
            made = rs.inputs(regime, self.make_inputs(st.config), st.draw, self._rng)
        except Exception as exc:
            failure = failure_event(self.req.reference, "check", exc, config_id=st.cid)
            raise _ReferenceFailed(failure) from exc
        expected, why = None, None
        if made is not None:
            expected, why = rs.expected(regime, made.inputs, self._reference_output)
        self.account.judge_s += time.perf_counter() - t0
        if why is not None:
            self.account.notes.append(why)
        if made is None or why is not None:
            return
        self._checked_call(st, ann, None, made.inputs, expected, regime=rs.check(regime, made))

    def _probe_plan(self, st: _ConfigState, ann: str) -> ProbePlan | None:
        """``ann``'s repeats and decoys on this config, drawn from the judge's secret
        generator on its first call (`draw_plan`); None when determinism is not checked.
        The untimed calls grow by them wherever they fall, so their number says nothing."""
        spec = self.req.check
        if not (spec.enabled and spec.check_determinism):
            return None
        plan = st.probes.get(ann)
        if plan is None:
            plan = st.probes[ann] = draw_plan(self._rng, self.untimed_calls, self.req.runs)
        return plan

    def _judge(
        self,
        tally: Tally,
        expected: Any,
        reply: ReplyMsg,
        actual: Any,
        bound: TrivialBound | None,
        inputs: Inputs,
        by: Callable[..., None] = judge_output,
    ) -> None:
        """``by``: the comparison of values (`judge_output`; a regime's own, regimes.py)."""
        for reason in reply.reasons:
            tally.fail(reason)
        assert reply.output is not None
        mismatch = type_mismatch(expected, reply.output)
        if mismatch is not None:
            tally.calls += 1
            tally.fail(f"output mismatch: {mismatch}")
            return
        if isinstance(actual, Undecodable):
            tally.calls += 1
            tally.fail(f"output mismatch: {actual.why}")
            return
        spec = self.req.check
        by(tally, expected, actual, atol=spec.atol, rtol=spec.rtol, bound=bound, inputs=inputs)

    def _report_config(self, st: _ConfigState) -> None:
        check = self.req.check.enabled
        for ann in st.anns:
            t, err = st.tallies[ann], st.errors.get(ann)
            passed = err is None and t.passed
            if ann == self.req.reference:
                if err is not None:
                    self.events.emit(err)
                elif check and not t.passed:
                    self.calls.suspect(
                        None,
                        "the reference, called in the contestant's process, disagreed with "
                        f"itself run by the judge ({'; '.join(t.reasons)}): candidate code "
                        "changed what the reference computes",
                        "",
                    )
            elif check or err is not None:
                if err is not None:
                    self.events.emit(err)
                self.events.emit(self._check_event(st.cid, ann, t, err))
            if passed or ann == self.req.reference:
                # The backend says whether work after the windows makes its times short.
                late = self.backend.late_work(
                    st.cid, st.after.get(ann, []), st.after_parts.get(ann, [])
                )
                if late is not None:
                    self.calls.suspect(ann, late, "")
                for ev in st.pending[ann]:
                    self.events.emit(ev)

    def _check_event(self, cid: int, ann: str, t: Tally, err: FailureEvent | None) -> CheckEvent:
        passed = err is None and t.passed
        reasons = sorted(set(t.reasons))
        if passed:
            error_class, message = None, None
            reasons = [self._blind[cid]] if cid in self._blind else reasons
        elif err is not None:
            error_class, message = err.error_class, err.message
        else:
            error_class, message = ErrorClass.INCORRECT, "; ".join(reasons)
        return CheckEvent(
            annotation=ann,
            config_id=cid,
            passed=passed,
            seeds=t.calls,
            max_abs_error=t.max_abs if err is None else None,
            max_rel_error=t.max_rel if err is None else None,
            mismatch_count=t.mismatches if err is None else None,
            first_bad_index=t.first_bad_index,
            reasons=reasons,
            error_class=error_class,
            message=message,
        )
