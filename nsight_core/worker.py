"""The worker: the only code that imports and runs candidates. Runs in the child process.

``python -m nsight_core.worker JOB_DIR`` reads ``JOB_DIR/job.json`` and, for a request:

1. imports the reference, the input maker and each candidate (a candidate that fails to
   import is reported and dropped; the others go on);
2. checks every candidate against the reference per config and seed, on fresh seeded
   inputs, each callable on its own clones (check.py does the comparing);
3. warms every passing (annotation, config) up outside any profiled range;
4. profiles: per config, per run, each annotation in turn (interleaved, so drift does not
   line up with one candidate), inputs made fresh outside the range, one NVTX range per
   call named by `RunKey`; with the events backend each call is also timed here.

It reports only through ``events.jsonl`` (protocol.py); stdout and stderr are the
candidate's. It is deliberately dumb: no statistics, no verdicts beyond the raw check.
"""

from __future__ import annotations

import contextlib
import random
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel

from nsight_core.annotation import RunContext, annotate, set_run_context
from nsight_core.collectors.events import Device, detect_device, start_timer
from nsight_core.errors import ErrorClass, NsightCoreError, WorkerExit
from nsight_core.protocol import (
    EVENTS_FILE,
    EVENTS_METRIC,
    JOB_FILE,
    CheckEvent,
    DoneEvent,
    FailureEvent,
    Phase,
    PhaseEvent,
    ProgressEvent,
    RangeEvent,
    RunKey,
    SampleEvent,
    WorkerJob,
)
from nsight_core.request import ProfileRequest

Inputs = tuple[tuple[Any, ...], dict[str, Any]]

CHECK_SEED_BASE = 1000
RUN_SEED_BASE = 500_000


class EventWriter:
    """Appends one JSON line per event and flushes, so a crash loses at most the last line."""

    def __init__(self, path: Path) -> None:
        self._fh: IO[str] = path.open("a", buffering=1, encoding="utf-8")

    def emit(self, event: BaseModel) -> None:
        self._fh.write(event.model_dump_json() + "\n")
        self._fh.flush()


def seed_all(seed: int) -> None:
    """Seed every RNG the candidate may use; frameworks only if already imported."""
    random.seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed % (2**32))
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        cupy.random.seed(seed % (2**32))


def sync_all() -> None:
    """Wait for every framework's GPU work, so a range encloses what its call launched."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        with contextlib.suppress(Exception):  # no device: nothing to wait for
            cupy.cuda.Device().synchronize()


def classify_exception(exc: BaseException) -> ErrorClass:
    """Compile errors of JITs (Triton, NVRTC via cupy) differ from run-time failures."""
    if isinstance(exc, SyntaxError):
        return ErrorClass.COMPILE_ERROR
    for cls in type(exc).__mro__:
        name = cls.__name__
        if "Compil" in name or name in {"CompileException", "NVRTCError"}:
            return ErrorClass.COMPILE_ERROR
    return ErrorClass.RUNTIME_ERROR


def _failure(
    annotation: str,
    phase: Phase,
    exc: BaseException,
    *,
    config_id: int | None = None,
    run: int | None = None,
) -> FailureEvent:
    if isinstance(exc, NsightCoreError):
        error_class, message = exc.error_class, str(exc)
    else:
        error_class, message = classify_exception(exc), f"{type(exc).__name__}: {exc}"
    file = getattr(exc, "filename", None) or getattr(exc, "file", None)
    line = getattr(exc, "lineno", None) or getattr(exc, "line", None)
    tb = "".join(traceback.format_exception(exc))
    return FailureEvent(
        annotation=annotation,
        config_id=config_id,
        run=run,
        phase=phase,
        error_class=error_class,
        message=message[:4000],
        traceback=tb[-6000:],
        file=str(file) if isinstance(file, str | Path) else None,
        line=line if isinstance(line, int) else None,
    )


def events_sample(key: RunKey, ns: float) -> SampleEvent:
    """One events-backend timing of the call `key`, in ns."""
    return SampleEvent(
        annotation=key.annotation,
        config_id=key.config_id,
        run=key.run,
        metric=EVENTS_METRIC,
        value=ns,
        unit="ns",
    )


def make_inputs(maker: Callable[..., Any], config: dict[str, Any], seed: int) -> Inputs:
    seed_all(seed)
    made = maker(**config)
    if isinstance(made, dict):
        return (), dict(made)
    if isinstance(made, tuple):
        return made, {}
    return (made,), {}


class RequestRunner:
    """Runs one ProfileRequest's phases inside the worker."""

    def __init__(self, job: WorkerJob, request: ProfileRequest, events: EventWriter) -> None:
        self.job = job
        self.req = request
        self.events = events
        self.phase_seconds: dict[str, float] = {}
        self.fns: dict[str, Callable[..., Any]] = {}
        self.maker: Callable[..., Any] | None = None
        # (annotation, config_id) pairs that may still be timed.
        self.alive: set[tuple[str, int]] = set()
        self.device: Device | None = None

    @contextmanager
    def phase(self, name: Phase) -> Iterator[None]:
        t0 = time.monotonic()
        self.events.emit(PhaseEvent(phase=name, state="start", t=t0))
        try:
            yield
        finally:
            t1 = time.monotonic()
            self.phase_seconds[name] = self.phase_seconds.get(name, 0.0) + (t1 - t0)
            self.events.emit(PhaseEvent(phase=name, state="end", t=t1))

    # -- phase 1 -------------------------------------------------------------------------
    def load(self) -> WorkerExit | None:
        from nsight_core.loader import load_callable

        source = Path(self.job.source_file) if self.job.source_file else None
        workdir = Path(self.job.workdir)
        for role, spec in (("reference", self.req.reference), ("inputs", self.req.inputs)):
            try:
                fn = load_callable(spec, workdir=workdir, source_file=source)
            except Exception as exc:
                ev = _failure(spec, "import", exc)
                self.events.emit(ev)
                return (
                    WorkerExit.COMPILE_FAILED
                    if ev.error_class == ErrorClass.COMPILE_ERROR
                    else WorkerExit.IMPORT_FAILED
                )
            if role == "reference":
                self.fns[spec] = fn
            else:
                self.maker = fn
        for spec in self.req.candidates:
            try:
                self.fns[spec] = load_callable(spec, workdir=workdir, source_file=source)
            except Exception as exc:
                self.events.emit(_failure(spec, "import", exc))
        n = len(self.req.configs)
        self.alive = {(a, c) for a in self.fns for c in range(n)}
        return None

    # -- phase 2 -------------------------------------------------------------------------
    def check(self) -> WorkerExit | None:
        from nsight_core import check as chk

        assert self.maker is not None
        ref = self.req.reference
        spec = self.req.check
        ref_failed_everywhere = True
        candidates = [c for c in self.req.candidates if c in self.fns]
        for cid, config in enumerate(self.req.configs):
            verdicts: dict[str, dict[str, Any]] = {
                c: {"passed": True, "abs": 0.0, "rel": 0.0, "mis": 0, "idx": None, "why": []}
                for c in candidates
            }
            errors: dict[str, FailureEvent] = {}
            ref_ok = True
            for s in range(spec.seeds):
                seed = self.job.seed + CHECK_SEED_BASE + 100 * cid + s
                try:
                    args, kwargs = make_inputs(self.maker, config, seed)
                    if self.device is None:
                        self.device = detect_device((args, kwargs))
                    r_args, r_kwargs = chk.clone_args((args, kwargs))
                    expected = self.fns[ref](*r_args, **r_kwargs)
                    sync_all()
                except Exception as exc:
                    self.events.emit(_failure(ref, "check", exc, config_id=cid))
                    ref_ok = False
                    break
                for cand in candidates:
                    if cand in errors:
                        continue
                    try:
                        self._check_one(chk, cand, args, kwargs, expected, verdicts[cand])
                    except Exception as exc:
                        errors[cand] = _failure(cand, "check", exc, config_id=cid)
                self.events.emit(
                    ProgressEvent(phase="check", config_id=cid, done=s + 1, total=spec.seeds)
                )
            if not ref_ok:
                self.alive = {(a, c) for (a, c) in self.alive if c != cid}
                continue
            ref_failed_everywhere = False
            for cand in candidates:
                self._emit_verdict(cand, cid, verdicts[cand], errors.get(cand))
        if ref_failed_everywhere and self.req.configs:
            return WorkerExit.REFERENCE_FAILED
        return None

    def _emit_verdict(
        self, cand: str, cid: int, v: dict[str, Any], err: FailureEvent | None
    ) -> None:
        if err is not None:
            self.events.emit(err)
        passed = err is None and bool(v["passed"])
        if passed:
            error_class, message = None, None
        elif err is not None:
            error_class, message = err.error_class, err.message
        else:
            error_class, message = ErrorClass.INCORRECT, "; ".join(sorted(set(v["why"])))
        self.events.emit(
            CheckEvent(
                annotation=cand,
                config_id=cid,
                passed=passed,
                seeds=self.req.check.seeds,
                max_abs_error=v["abs"] if err is None else None,
                max_rel_error=v["rel"] if err is None else None,
                mismatch_count=v["mis"] if err is None else None,
                first_bad_index=v["idx"],
                reasons=sorted(set(v["why"])),
                error_class=error_class,
                message=message,
            )
        )
        if not passed:
            self.alive.discard((cand, cid))

    def _check_one(
        self,
        chk: Any,
        cand: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        expected: Any,
        v: dict[str, Any],
    ) -> None:
        spec = self.req.check
        c_args, c_kwargs = chk.clone_args((args, kwargs))
        snap = chk.snapshot_inputs((c_args, c_kwargs))
        out = self.fns[cand](*c_args, **c_kwargs)
        sync_all()
        diff = chk.compare_outputs(expected, out, atol=spec.atol, rtol=spec.rtol)
        if not diff.passed:
            if v["passed"] or not any(w.startswith("output mismatch") for w in v["why"]):
                v["why"].append(f"output mismatch: {diff.reason}")  # first seed's detail only
            v["passed"] = False
            if v["idx"] is None and diff.first_bad_index is not None:
                v["idx"] = list(diff.first_bad_index)
        for key, attr in (("abs", "max_abs_error"), ("rel", "max_rel_error")):
            value = getattr(diff, attr)
            if value is not None:
                v[key] = max(v[key], float(value))
        v["mis"] += int(diff.mismatch_count or 0)
        if spec.check_mutation:
            for name in chk.mutated(snap, (c_args, c_kwargs)):
                v["passed"] = False
                v["why"].append(f"mutated input {name}")
        if spec.check_aliasing:
            for name in chk.aliased(out, (c_args, c_kwargs), expected):
                v["passed"] = False
                v["why"].append(f"output aliases {name}")
        if spec.check_determinism:
            d_args, d_kwargs = chk.clone_args((args, kwargs))
            again = self.fns[cand](*d_args, **d_kwargs)
            sync_all()
            same = chk.same_result(out, again)
            if not same.passed:
                v["passed"] = False
                v["why"].append("nondeterministic: two calls on the same inputs differ")

    # -- phase 3 -------------------------------------------------------------------------
    def warmup(self) -> None:
        assert self.maker is not None
        set_run_context(None)
        for cid, config in enumerate(self.req.configs):
            for ann in self.req.annotations:
                if (ann, cid) not in self.alive:
                    continue
                try:
                    for w in range(self.req.warmup):
                        args, kwargs = make_inputs(self.maker, config, self.job.seed + 7 + w)
                        if self.device is None:
                            self.device = detect_device((args, kwargs))
                        if self.job.backend == "events":
                            # Same pattern as a timed call, so the L2-flush buffer is
                            # allocated here and the allocator's first growth is not timed.
                            self.device.flush_l2()
                        self.fns[ann](*args, **kwargs)
                        sync_all()
                except Exception as exc:
                    self.events.emit(_failure(ann, "warmup", exc, config_id=cid))
                    self.alive.discard((ann, cid))

    # -- phase 4 -------------------------------------------------------------------------
    def profile(self) -> None:
        assert self.maker is not None
        timed = self.job.backend == "events"
        total = sum(1 for _ in self.alive) * self.req.runs
        done = 0
        for cid, config in enumerate(self.req.configs):
            for run in range(self.req.runs):
                for ann in self.req.annotations:
                    if (ann, cid) not in self.alive:
                        continue
                    self._profile_one(ann, cid, run, config, timed)
                    done += 1
                    self.events.emit(
                        ProgressEvent(
                            phase="profile",
                            annotation=ann,
                            config_id=cid,
                            run=run,
                            done=done,
                            total=total,
                        )
                    )
        set_run_context(None)

    def _profile_one(
        self, ann: str, cid: int, run: int, config: dict[str, Any], timed: bool
    ) -> None:
        assert self.maker is not None
        try:
            args, kwargs = make_inputs(self.maker, config, self.job.seed + RUN_SEED_BASE + run)
        except Exception as exc:
            self.events.emit(_failure(self.req.inputs, "profile", exc, config_id=cid, run=run))
            return
        device = self.device or detect_device((args, kwargs))
        self.device = device
        device.sync()
        fn = self.fns[ann]
        if timed:
            set_run_context(None)
            self._time_one(device, fn, RunKey(ann, cid, run), args, kwargs)
            return
        set_run_context(
            RunContext(
                config_id=cid, run=run, profiling=True, on_range=self._on_range, sync=sync_all
            )
        )
        # A raise is reported by _on_range, with its traceback; the sweep goes on.
        with contextlib.suppress(Exception), annotate(ann):
            fn(*args, **kwargs)

    def _time_one(
        self,
        device: Device,
        fn: Callable[..., Any],
        key: RunKey,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        """Events backend: the clock brackets the bare call; reporting happens after it."""
        try:
            _, ns = device.time_call(lambda: fn(*args, **kwargs))
        except Exception as exc:
            self._on_range(key, exc, None)
            return
        self._on_range(key, None, None)
        self.events.emit(events_sample(key, ns))

    def _on_range(self, key: RunKey, exc: BaseException | None, elapsed: float | None) -> None:
        self.events.emit(
            RangeEvent(
                annotation=key.annotation, config_id=key.config_id, run=key.run, ok=exc is None
            )
        )
        if exc is not None:
            self.events.emit(
                _failure(key.annotation, "profile", exc, config_id=key.config_id, run=key.run)
            )

    def run(self) -> int:
        with self.phase("import"):
            code = self.load()
        if code is not None:
            return int(code)
        if self.req.check.enabled:
            with self.phase("check"):
                code = self.check()
            if code is not None:
                return int(code)
        with self.phase("warmup"):
            self.warmup()
        with self.phase("profile"):
            self.profile()
        device = self.device.name if self.device else None
        self.events.emit(DoneEvent(phase_seconds=self.phase_seconds, device=device))
        return int(WorkerExit.OK)


def run_function_job(job: WorkerJob, events: EventWriter) -> int:
    """The `@kernel` mode: call the user's function per (config, run); it annotates itself."""
    import cloudpickle

    assert job.function is not None
    spec = job.function
    phase_seconds: dict[str, float] = {}
    # The pickle holds the function and its bound configs: config values may be any
    # picklable object (tuples, tensors' shapes, dataclasses), not only JSON.
    fn, configs = cloudpickle.loads((Path(job.workdir) / spec.pickle_file).read_bytes())

    reported: set[int] = set()

    timed = job.backend == "events"

    def on_range(key: RunKey, exc: BaseException | None, elapsed: float | None) -> None:
        if exc is not None:
            reported.add(id(exc))
        if elapsed is not None:
            events.emit(events_sample(key, elapsed))
        events.emit(
            RangeEvent(
                annotation=key.annotation, config_id=key.config_id, run=key.run, ok=exc is None
            )
        )
        if exc is not None:
            events.emit(
                _failure(key.annotation, "profile", exc, config_id=key.config_id, run=key.run)
            )

    t0 = time.monotonic()
    for cid, (args, kwargs) in enumerate(configs):
        for _ in range(spec.warmup):
            set_run_context(RunContext(config_id=cid, run=-1, profiling=False))
            try:
                fn(*args, **kwargs)
                sync_all()
            except Exception as exc:
                events.emit(_failure("<function>", "warmup", exc, config_id=cid))
    phase_seconds["warmup"] = time.monotonic() - t0
    t0 = time.monotonic()
    total, done = len(configs) * spec.runs, 0
    for cid, (args, kwargs) in enumerate(configs):
        for run in range(spec.runs):
            seed_all(job.seed + RUN_SEED_BASE + run)
            set_run_context(
                RunContext(
                    config_id=cid,
                    run=run,
                    profiling=True,
                    on_range=on_range,
                    sync=None if timed else sync_all,
                    timer=start_timer if timed else None,
                    nvtx=not timed,
                )
            )
            try:
                fn(*args, **kwargs)
                sync_all()
            except Exception as exc:
                # Raised outside any annotation (inside ones are reported by on_range).
                if id(exc) not in reported:
                    events.emit(_failure("<function>", "profile", exc, config_id=cid, run=run))
            done += 1
            events.emit(
                ProgressEvent(phase="profile", config_id=cid, run=run, done=done, total=total)
            )
    set_run_context(None)
    phase_seconds["profile"] = time.monotonic() - t0
    events.emit(DoneEvent(phase_seconds=phase_seconds, device=None))
    return int(WorkerExit.OK)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: python -m nsight_core.worker JOB_DIR\n")
        return int(WorkerExit.BAD_JOB)
    job_dir = Path(argv[1])
    try:
        job = WorkerJob.model_validate_json((job_dir / JOB_FILE).read_text())
    except Exception as exc:
        sys.stderr.write(f"nsight_core.worker: bad job file: {exc}\n")
        return int(WorkerExit.BAD_JOB)
    events = EventWriter(job_dir / EVENTS_FILE)
    if job.backend == "ncu":
        import nvtx  # noqa: F401  (loaded now, so no profiled call pays for the import)

    # The cwd stays the sandbox's private directory; files and imports resolve against workdir.
    if job.workdir not in sys.path:
        sys.path.insert(0, job.workdir)
    try:
        if job.mode == "function":
            return run_function_job(job, events)
        if job.request is None:
            return int(WorkerExit.BAD_JOB)
        return RequestRunner(job, job.request, events).run()
    except Exception as exc:
        events.emit(_failure("<worker>", "profile", exc))
        return int(WorkerExit.INTERNAL)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
