"""The measuring side of bench_cupti_accuracy.py: one variant in this process (torch, and
cupti-python, nvtx or libcupti as the variant needs), its numbers as JSON.

    python tools/bench/cupti_accuracy_worker.py VARIANT OUT.json [--runs N] [--warmup N]
        [--flush read|write] [--cases 0,1,...]

The parent runs it in a fresh process per variant (under ncu for ``ncu``) with a time limit;
the JSON is rewritten after every case, so a process killed at its limit keeps the cases
that finished. Only this side imports torch.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_cupti_accuracy import (
    ACTIVITY_KINDS,
    CASES,
    EXAMPLES,
    L2_FLUSH_FACTOR,
    NCU_METRIC,
    NVTX_DOMAIN,
    RANGE_MODES,
    Case,
    assign_to_windows,
    range_name,
)


def _build(case: Case, torch: Any) -> Callable[[], Any]:
    if case.op == "scale":
        x = torch.randn(case.dims[0], device="cuda")
        return lambda: x.mul(2.0)
    if case.op.startswith("softmax_"):
        sys.path.insert(0, str(EXAMPLES))
        import gpu_softmax as k  # the examples' kernels, as bench_softmax runs them

        x = k.make_inputs(*case.dims)[0]
        fn = k.torch_softmax if case.op == "softmax_torch" else k.triton_softmax
        return lambda: fn(x)
    n = case.dims[0]
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    return lambda: a @ b


class _NcuMarks:
    """Under ncu: an NVTX range per measured call; ncu's report holds the numbers."""

    def __init__(self) -> None:
        import nvtx

        self._nvtx = nvtx
        self._rid: Any = None

    def begin(self, case: int, run: int) -> None:
        self._rid = self._nvtx.start_range(message=range_name(case, run), domain=NVTX_DOMAIN)

    def end(self) -> None:
        self._nvtx.end_range(self._rid)

    def finish(self) -> list[list[tuple[str, float]]]:
        return []

    def close(self) -> None:
        pass


class _Activity:
    """CUPTI activity records of one kernel kind (cupti-python, as collectors/cupti.py)."""

    def __init__(self, kind: str) -> None:
        from cupti import cupti

        self._cupti = cupti
        self._kinds = {int(cupti.ActivityKind.KERNEL), int(cupti.ActivityKind.CONCURRENT_KERNEL)}
        self._records: list[tuple[str, int, int]] = []
        self._errors: list[str] = []
        self._windows: list[tuple[int, int]] = []
        self._t0 = 0
        self._kind = getattr(cupti.ActivityKind, kind)
        cupti.activity_register_callbacks(lambda: (4 << 20, 0), self._completed)
        cupti.activity_enable(self._kind)

    def _completed(self, activities: Sequence[Any]) -> None:
        try:
            for a in activities:
                if int(a.kind) in self._kinds:
                    name = a.name.decode() if isinstance(a.name, bytes) else str(a.name)
                    self._records.append((name, int(a.start), int(a.end)))
        except Exception as exc:
            self._errors.append(f"{type(exc).__name__}: {exc}")

    def begin(self, case: int, run: int) -> None:
        self._t0 = int(self._cupti.get_timestamp())

    def end(self) -> None:
        self._windows.append((self._t0, int(self._cupti.get_timestamp())))

    def finish(self) -> list[list[tuple[str, float]]]:
        self._cupti.activity_flush_all(1)
        if self._errors:
            raise RuntimeError("; ".join(self._errors[:3]))
        records, self._records = self._records, []
        windows, self._windows = self._windows, []
        return assign_to_windows(records, windows)

    def close(self) -> None:
        self._cupti.activity_flush_all(1)
        self._cupti.activity_disable(self._kind)


class _Backend:
    """The cupti backend's own timer (nsight_core.collectors.cupti.CuptiTimer): its windows,
    its L2 flush inside them, its launch-API records; the kernels it attributes to a call."""

    def __init__(self) -> None:
        from nsight_core.collectors.cupti import CuptiTimer  # the backend, as a contestant runs it

        self._timer = CuptiTimer()
        self._timer.start()
        self._device: Any = None
        self._t0 = 0
        self._runs: list[list[tuple[str, float]]] = []

    def attach(self, torch: Any) -> None:
        from nsight_core.collectors.events import Device

        self._device = Device("torch-cuda", f"cuda:0 ({torch.cuda.get_device_name(0)})")

    def begin(self, case: int, run: int) -> None:
        self._t0 = self._timer.open_window(self._device)

    def end(self) -> None:
        _ns, spans = self._timer.close_window(self._t0)
        self._runs.append([(k.name, float(k.end_ns - k.start_ns)) for k in spans])

    def finish(self) -> list[list[tuple[str, float]]]:
        runs, self._runs = self._runs, []
        return runs

    def close(self) -> None:
        self._timer.stop()


class _Ranges:
    """CUPTI's range profiler (cupti_range), `NCU_METRIC` per range."""

    def __init__(self, mode: str, torch: Any, notes: list[str]) -> None:
        import cupti_range

        self._prof = cupti_range.RangeProfiler(NCU_METRIC, mode, torch.cuda.current_device())
        self._runs: list[list[tuple[str, float]]] = []
        self._dropped = 0
        notes.append(
            f"range profiler: {self._prof.lib_path}, chip {self._prof.chip}, "
            f"{self._prof.passes} pass(es) for {NCU_METRIC}"
        )
        self._notes = notes

    def begin(self, case: int, run: int) -> None:
        self._prof.start(range_name(case, run))

    def end(self) -> None:
        ranges, dropped = self._prof.stop()
        self._dropped += dropped
        self._runs.append([(r.name, r.value) for r in ranges])

    def finish(self) -> list[list[tuple[str, float]]]:
        runs, self._runs = self._runs, []
        if self._dropped:
            self._notes.append(f"{self._dropped} range(s) dropped")
            self._dropped = 0
        if self._prof.reconfigured:
            self._notes.append(f"config set again before {self._prof.reconfigured} start(s)")
            self._prof.reconfigured = 0
        return runs

    def close(self) -> None:
        self._prof.close()


def _timer_before_cuda(variant: str) -> Any:
    """The CUPTI activity timers, enabled before CUDA starts (as the backend's contestant
    does), so they see every launch; None for the others."""
    if variant in ACTIVITY_KINDS:
        return _Activity(ACTIVITY_KINDS[variant])
    if variant == "backend":
        return _Backend()
    return None


def _timer_after_cuda(variant: str, early: Any, torch: Any, notes: list[str]) -> Any:
    """The variant's timer once torch holds a CUDA context (NVTX, the range profiler)."""
    if variant == "ncu":
        return _NcuMarks()
    if variant in RANGE_MODES:
        return _Ranges(RANGE_MODES[variant], torch, notes)
    if variant == "backend":
        early.attach(torch)
    if early is None:
        raise ValueError(f"unknown variant {variant!r}")
    return early


def _measure(case: int, timer: Any, flush_l2: Callable[[], Any], runs: int, warmup: int) -> Any:
    """One case: warm-up calls, then each measured call after an L2 flush; its runs."""
    torch = sys.modules["torch"]
    fn = _build(CASES[case], torch)
    for _ in range(warmup):
        fn()
        torch.cuda.synchronize()
    for r in range(runs):
        flush_l2()
        torch.cuda.synchronize()
        timer.begin(case, r)
        fn()
        torch.cuda.synchronize()
        timer.end()
    return timer.finish()


def worker(
    variant: str, case_ids: Sequence[int], runs: int, warmup: int, flush: str, out: Path
) -> int:
    """Measure each case in this process; the JSON is rewritten after every case, so a
    timeout keeps the cases that finished."""
    doc: dict[str, Any] = {"variant": variant, "samples": {}, "errors": {}, "notes": []}
    doc["setup_error"] = None

    def save() -> None:
        out.write_text(json.dumps(doc))

    try:
        early = _timer_before_cuda(variant)
        import torch  # the worker's own import; the parent never loads torch

        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        timer = _timer_after_cuda(variant, early, torch, doc["notes"])
        l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20))
        buf = torch.zeros(max(l2, 1 << 20) * L2_FLUSH_FACTOR // 4, device="cuda")
        flush_l2 = buf.sum if flush == "read" else buf.zero_
    except Exception as exc:
        doc["setup_error"] = f"{type(exc).__name__}: {exc}"
        save()
        return 0
    for i in case_ids:
        try:
            doc["samples"][str(i)] = _measure(i, timer, flush_l2, runs, warmup)
        except Exception as exc:
            doc["errors"][str(i)] = f"{type(exc).__name__}: {exc}"
            with contextlib.suppress(Exception):
                timer.finish()  # what this case left behind must not reach the next one
        save()
    with contextlib.suppress(Exception):
        timer.close()
    save()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("variant")
    p.add_argument("out", type=Path)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--flush", choices=("read", "write"), default="read")
    p.add_argument("--cases", default=",".join(str(i) for i in range(len(CASES))))
    args = p.parse_args(argv)
    ids = [int(x) for x in args.cases.split(",") if x]
    return worker(args.variant, ids, args.runs, args.warmup, args.flush, args.out)


if __name__ == "__main__":
    sys.exit(main())
