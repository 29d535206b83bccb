"""Each CUPTI route's kernel time against ncu's gpu__time_duration.sum, kernel by kernel.

One command, from about 2 us to 2 ms of kernel time.

Run on a GPU host with ncu, ncu_report, nvtx, cupti-python, torch and triton:

    python tools/bench/bench_cupti_accuracy.py [--json OUT.json] [--runs 20]

Workload: kernels from about 2 us to 2 ms: a torch elementwise scale on 2^12 to 2^27 floats,
torch's and the Triton softmax of examples/gpu_softmax.py at bench_softmax's shapes, and
bf16 matmuls of 1024 to 8192. Every variant runs the same worker (cupti_accuracy_worker.py)
in a fresh process with a time limit, killed with its process group at the limit: each case
gets ``--warmup`` unmeasured calls, then ``--runs`` measured calls, each after an L2 flush
(a read of twice the L2, as the cupti backend flushes) and a synchronization.

- ``ncu``: the raw ncu CLI, ``--metrics gpu__time_duration.sum --cache-control all
  --clock-control none``, one NVTX range per measured call, read back with ncu_report;
  the baseline.
- ``concurrent``: CUPTI activity, kind ``CONCURRENT_KERNEL``: each kernel record's end - start.
- ``kernel``: CUPTI activity, kind ``KERNEL`` (kernels serialized), as the cupti backend
  records them.
- ``backend``: the cupti backend's own timer (``CuptiTimer``: its windows, its L2 flush, its
  launch-API records), the numbers its rows carry.
- ``range``: CUPTI's range profiler (``cupti_range.py``: ctypes on libcupti, since
  cupti-python does not wrap it), auto ranges with kernel replay: each kernel's own
  ``gpu__time_duration.sum``, counted by the same counters ncu reads.
- ``range-user``: the range profiler with one user range around the call.
- ``ncu-again`` (``--ncu-again``): ncu once more after the others, against the first: ncu's
  own drift between runs, the floor below which no other gap means anything.

It prints, per case, ncu's median and spread (IQR over the median), each variant's median,
its difference from ncu in ns and %, then per variant a least-squares fit
``diff = offset + slope * ncu duration`` over the cases: a constant offset is a floor (the
line says from which kernel duration it stays within 3 %); a slope is a proportional gap.
A variant that cannot run says why (its exception or the tail of its output) and the others'
numbers stand. No correction is applied to any number.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
EXAMPLES = ROOT / "examples"
sys.path[:0] = [str(ROOT), str(HERE)]

from nsight_core.collectors.kernel_names import kernel_name  # noqa: E402

NCU_METRIC = "gpu__time_duration.sum"
GOAL_PCT = 3.0
NVTX_DOMAIN = "nspyacc"
VARIANTS = ("ncu", "kernel", "backend", "concurrent", "range", "range-user")
"""In run order: ``kernel`` first compiles the Triton kernels into the shared cache."""
ACTIVITY_KINDS = {"kernel": "KERNEL", "concurrent": "CONCURRENT_KERNEL"}
RANGE_MODES = {"range": "auto", "range-user": "user"}
NCU_AGAIN = "ncu-again"
"""A second ncu run after the others (``--ncu-again``): ncu's own drift between runs, the
floor no other variant can be held below."""
L2_FLUSH_FACTOR = 2


@dataclass(frozen=True)
class Case:
    """One kernel (or one call of a few) at one size."""

    name: str
    op: str  # "scale" | "softmax_torch" | "softmax_triton" | "matmul"
    dims: tuple[int, ...]


CASES: tuple[Case, ...] = (
    *(Case(f"scale 2^{p}", "scale", (1 << p,)) for p in (12, 16, 20, 23, 25, 27)),
    *(
        Case(f"softmax {lib} {r}x{c}", f"softmax_{lib}", (r, c))
        for lib in ("torch", "triton")
        for r, c in ((4096, 1024), (4096, 4096))
    ),
    *(Case(f"matmul bf16 {n}", "matmul", (n,)) for n in (1024, 2048, 4096, 8192)),
)

Samples = dict[int, list[list[tuple[str, float]]]]
"""Case index -> measured runs -> the run's kernels as (name, ns)."""


# -- pure parts (tested on CPU) -----------------------------------------------------------


def range_name(case: int, run: int) -> str:
    """The NVTX range of one measured call under ncu."""
    return f"c{case}:r{run}"


def parse_range_name(name: str) -> tuple[int, int] | None:
    """(case, run) of a `range_name`; None for any other name."""
    parts = name.split(":")
    if len(parts) != 2 or not parts[0].startswith("c") or not parts[1].startswith("r"):
        return None
    try:
        return int(parts[0][1:]), int(parts[1][1:])
    except ValueError:
        return None


def group_by_range(actions: Iterable[tuple[str, str, float]]) -> Samples:
    """ncu's results, (NVTX range name, kernel, value) in report order, as `Samples`: runs in
    run order, kernels in report order; actions outside our ranges are left out."""
    runs: dict[int, dict[int, list[tuple[str, float]]]] = {}
    for rng, kernel, value in actions:
        key = parse_range_name(rng)
        if key is not None:
            runs.setdefault(key[0], {}).setdefault(key[1], []).append((kernel, value))
    return {case: [by_run[r] for r in sorted(by_run)] for case, by_run in sorted(runs.items())}


def assign_to_windows(
    records: Iterable[tuple[str, int, int]], windows: Sequence[tuple[int, int]]
) -> list[list[tuple[str, float]]]:
    """Kernel activity records (name, start, end) into the measured calls whose [t0, t1]
    holds their start, in start order; records outside every window are dropped (warm-up
    and L2 flush kernels)."""
    out: list[list[tuple[str, float]]] = [[] for _ in windows]
    for name, start, end in sorted(records, key=lambda r: (r[1], r[2])):
        for i, (t0, t1) in enumerate(windows):
            if t0 <= start <= t1:
                out[i].append((name, float(end - start)))
                break
    return out


def parse_worker_doc(doc: Mapping[str, Any]) -> tuple[Samples, dict[int, str], str | None]:
    """A worker's JSON: (samples, per-case errors, setup error)."""
    samples: Samples = {
        int(case): [[(str(k), float(v)) for k, v in run] for run in runs]
        for case, runs in (doc.get("samples") or {}).items()
    }
    errors = {int(case): str(text) for case, text in (doc.get("errors") or {}).items()}
    setup = doc.get("setup_error")
    return samples, errors, None if setup is None else str(setup)


def call_totals(runs: Sequence[Sequence[tuple[str, float]]]) -> list[float]:
    """Each run's kernel time summed over its kernels (runs without kernels left out)."""
    return [sum(v for _, v in run) for run in runs if run]


@dataclass(frozen=True)
class Summary:
    median: float
    n: int
    iqr_pct: float
    """Interquartile range over the median, in %: the run-to-run spread."""


def summarize(values: Sequence[float]) -> Summary | None:
    if not values:
        return None
    med = statistics.median(values)
    if len(values) >= 4:
        q = statistics.quantiles(values, n=4, method="inclusive")
        iqr = q[2] - q[0]
    else:
        iqr = max(values) - min(values)
    return Summary(med, len(values), 100 * iqr / med if med else math.nan)


@dataclass(frozen=True)
class Fit:
    """diff = offset_ns + slope * duration_ns, least squares over the cases."""

    offset_ns: float
    slope: float
    r2: float
    n: int


def fit_offset_slope(durations: Sequence[float], diffs: Sequence[float]) -> Fit | None:
    """The least-squares line through (duration, diff); None with fewer than two distinct
    durations. R² is 1.0 when the diffs do not vary at all."""
    n = len(durations)
    if n != len(diffs) or n < 2 or len(set(durations)) < 2:
        return None
    mx, my = statistics.fmean(durations), statistics.fmean(diffs)
    sxx = sum((x - mx) ** 2 for x in durations)
    sxy = sum((x - mx) * (y - my) for x, y in zip(durations, diffs, strict=True))
    slope = sxy / sxx
    offset = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in diffs)
    ss_res = sum((y - offset - slope * x) ** 2 for x, y in zip(durations, diffs, strict=True))
    return Fit(offset, slope, 1.0 - ss_res / ss_tot if ss_tot else 1.0, n)


def min_duration_within(fit: Fit, pct: float = GOAL_PCT) -> float | None:
    """The shortest kernel duration (ns) from which the fitted gap stays within ``pct`` % of
    the duration; None when it never does (the proportional part alone exceeds ``pct``)."""
    limit = pct / 100
    if abs(fit.slope) >= limit:
        return None
    if fit.offset_ns == 0:
        return 0.0
    sign = 1.0 if fit.offset_ns > 0 else -1.0
    return abs(fit.offset_ns) / (limit - sign * fit.slope)


@dataclass
class VariantResult:
    """What one variant's process gave: samples per case, and why any part is missing."""

    variant: str
    samples: Samples = field(default_factory=dict)
    case_errors: dict[int, str] = field(default_factory=dict)
    error: str | None = None
    """Why the variant gave nothing (or less): setup failure, timeout, crash."""
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Cell:
    """One variant on one case, against ncu."""

    median: float
    diff_ns: float
    diff_pct: float


@dataclass(frozen=True)
class CaseRow:
    case: int
    name: str
    kernels: str
    ncu: Summary | None
    cells: dict[str, Cell | None]


def compare(
    cases: Sequence[int], ncu: VariantResult, others: Sequence[VariantResult]
) -> list[CaseRow]:
    """Per case: ncu's summary and each other variant's median against ncu's median."""
    rows = []
    for i in cases:
        base = summarize(call_totals(ncu.samples.get(i, [])))
        names: list[str] = []
        for source in (ncu, *others):  # ncu's names first; CUPTI's when ncu has none
            for run in source.samples.get(i, [])[:1]:
                names = names or [kernel_name(k) for k, _ in run]
        cells: dict[str, Cell | None] = {}
        for v in others:
            s = summarize(call_totals(v.samples.get(i, [])))
            if s is None or base is None:
                cells[v.variant] = None
                continue
            d = s.median - base.median
            cells[v.variant] = Cell(s.median, d, 100 * d / base.median)
        label = ",".join(dict.fromkeys(names)) if names else "?"
        rows.append(CaseRow(i, CASES[i].name, label, base, cells))
    return rows


def fit_variant(rows: Sequence[CaseRow], variant: str) -> Fit | None:
    pts = [
        (r.ncu.median, c.diff_ns)
        for r in rows
        if r.ncu is not None and (c := r.cells.get(variant)) is not None
    ]
    return fit_offset_slope([p[0] for p in pts], [p[1] for p in pts])


def fit_line(rows: Sequence[CaseRow], variant: str, pct: float = GOAL_PCT) -> str:
    """One line per variant: the fit, the cases within ``pct``, and where the fit meets it."""
    cells = [c for r in rows if (c := r.cells.get(variant)) is not None]
    if not cells:
        return f"{variant}: no case to compare"
    within = sum(abs(c.diff_pct) <= pct for c in cells)
    head = f"{variant}: {within}/{len(cells)} cases within {pct:g} %"
    fit = fit_variant(rows, variant)
    if fit is None:
        return head + "; too few durations to fit"
    line = (
        f"{head}; diff = {fit.offset_ns:+.0f} ns {100 * fit.slope:+.2f} % x duration "
        f"(R² {fit.r2:.2f}, {fit.n} cases); "
    )
    floor = min_duration_within(fit, pct)
    if floor is None:
        return line + f"the proportional part alone exceeds {pct:g} %: no duration meets it"
    return line + f"the fit is within {pct:g} % for kernels of {floor / 1000:.1f} us and longer"


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None or math.isnan(x) else format(x, spec)


def _cell_text(c: Cell | None) -> str:
    if c is None:
        return f"{'-':>10} {'-':>7} {'-':>6}"
    return f"{_fmt(c.median, '10.0f')} {_fmt(c.diff_ns, '+7.0f')} {_fmt(c.diff_pct, '+6.2f')}"


def format_table(
    rows: Sequence[CaseRow],
    variants: Sequence[str],
    results: Mapping[str, VariantResult],
    pct: float = GOAL_PCT,
) -> str:
    """The per-case table, one fit line per variant, and each variant's errors."""
    head = f"{'case':24} {'kernel':28} {'ncu ns':>10} {'iqr%':>5}"
    for v in variants:
        head += f" | {v[:10]:>10} {'Δns':>7} {'Δ%':>6}"
    lines = [head]
    for r in rows:
        med, iqr = (r.ncu.median, r.ncu.iqr_pct) if r.ncu else (None, None)
        line = f"{r.name:24} {r.kernels[:28]:28} {_fmt(med, '10.0f'):>10} {_fmt(iqr, '5.1f'):>5}"
        for v in variants:
            line += " | " + _cell_text(r.cells.get(v))
        lines.append(line)
    lines.append("")
    lines += [fit_line(rows, v, pct) for v in variants]
    for v, res in results.items():
        status = f"{v}: {res.wall_s:.1f} s"
        if res.error:
            status += f"; FAILED: {res.error}"
        for case, text in sorted(res.case_errors.items()):
            status += f"\n  {CASES[case].name}: {text}"
        for note in res.notes:
            status += f"\n  note: {note}"
        lines.append(status)
    return "\n".join(lines)


# -- running the variants ------------------------------------------------------------------


def tail(path: Path, chars: int = 1500) -> str:
    with contextlib.suppress(OSError):
        return path.read_text(errors="replace")[-chars:].strip()
    return ""


def run_bounded(
    argv: Sequence[str], timeout_s: float, log: Path, env: Mapping[str, str] | None = None
) -> tuple[int | None, float]:
    """Run ``argv`` in its own process group, output to ``log``; at ``timeout_s`` the group
    is killed. (exit code or None when it timed out or could not start, wall seconds)."""
    t0 = time.monotonic()
    with open(log, "wb") as out:
        try:
            proc = subprocess.Popen(
                list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env=None if env is None else dict(env),
            )  # fmt: skip
        except OSError as exc:
            out.write(f"could not start {argv[0]}: {exc}\n".encode())
            return None, time.monotonic() - t0
        rc: int | None
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            rc = None
            out.write(f"\nkilled after {timeout_s:g} s\n".encode())
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # the group: anything it left running
            proc.wait()
    return rc, time.monotonic() - t0


def ncu_samples(report: Path) -> Samples:
    """Our ranges' kernels and their `NCU_METRIC` from an ncu report (ncu_report)."""
    import ncu_report  # on GPU hosts only

    def actions() -> Iterable[tuple[str, str, float]]:
        ctx = ncu_report.load_report(str(report))
        for rng in ctx:
            for i in range(len(rng)):
                action = rng[i]
                state = action.nvtx_state()
                for d in state.domains():
                    dom = state.domain_by_id(d)
                    if dom.name() == NVTX_DOMAIN:
                        name = dom.start_end_range(0).name()
                        value = float(action.metric_by_name(NCU_METRIC).value())
                        yield name, str(action.name()), value

    return group_by_range(actions())


def run_variant(
    variant: str, work: Path, cases: Sequence[int], args: argparse.Namespace, label: str = ""
) -> VariantResult:
    """One variant in a fresh process, reported as ``label`` (default: the variant); never
    raises for the variant's own failures."""
    label = label or variant
    res = VariantResult(label)
    out, log = work / f"{label}.json", work / f"{label}.log"
    argv = [
        sys.executable, str(HERE / "cupti_accuracy_worker.py"), variant, str(out),
        "--runs", str(args.runs), "--warmup", str(args.warmup), "--flush", args.flush,
        "--cases", ",".join(map(str, cases)),
    ]  # fmt: skip
    report = work / f"{label}.ncu-rep"
    if variant == "ncu":
        argv = [
            os.environ.get("NSPY_NCU", "ncu"), "--nvtx", "--nvtx-include",
            f"regex:{NVTX_DOMAIN}@.+", "--metrics", NCU_METRIC, "--cache-control", args.ncu_cache,
            "--clock-control", "none", "--target-processes", "all", "-f", "-o",
            str(report), *argv,
        ]  # fmt: skip
    timeout = args.timeout * (2 if variant == "ncu" else 1)
    rc, res.wall_s = run_bounded(argv, timeout, log)
    if rc != 0:
        res.error = f"exit {rc if rc is not None else 'none (killed or not started)'}: " + (
            tail(log) or "no output"
        )
    with contextlib.suppress(OSError, ValueError):
        res.samples, res.case_errors, setup = parse_worker_doc(json.loads(out.read_text()))
        if setup:
            res.error = setup if res.error is None else f"{setup}; {res.error}"
        res.notes = list(json.loads(out.read_text()).get("notes") or [])
    if variant == "ncu" and report.exists():
        try:
            res.samples = ncu_samples(report)
        except Exception as exc:
            res.error = (res.error + "; " if res.error else "") + (
                f"reading {report.name}: {type(exc).__name__}: {exc}"
            )
    return res


# -- the command ---------------------------------------------------------------------------


def select_cases(spec: str) -> list[int]:
    """'all', or comma-separated case indices or name substrings ('softmax,matmul bf16 8192')."""
    if spec.strip() in ("", "all"):
        return list(range(len(CASES)))
    picked: list[int] = []
    for part in (p.strip() for p in spec.split(",")):
        if part.isdigit():
            picked.append(int(part))
        else:
            picked += [i for i, c in enumerate(CASES) if part in c.name]
    return sorted(set(i for i in picked if 0 <= i < len(CASES)))


def to_json(
    cases: Sequence[int], results: Mapping[str, VariantResult], rows: Sequence[CaseRow]
) -> dict[str, Any]:
    variants = [v for v in results if v != "ncu"]
    return {
        "metric": NCU_METRIC,
        "cases": {str(i): asdict(CASES[i]) for i in cases},
        "variants": {
            v: {
                "wall_s": r.wall_s,
                "error": r.error,
                "case_errors": {str(k): t for k, t in r.case_errors.items()},
                "notes": r.notes,
                "samples": {str(k): runs for k, runs in r.samples.items()},
            }
            for v, r in results.items()
        },
        "rows": [asdict(r) for r in rows],
        "fits": {v: (asdict(f) if (f := fit_variant(rows, v)) else None) for v in variants},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--json", type=Path, default=None, help="write every number here")
    p.add_argument("--runs", type=int, default=20, help="measured calls per case")
    p.add_argument("--warmup", type=int, default=3, help="unmeasured calls per case first")
    p.add_argument(
        "--variants", default=",".join(VARIANTS), help="comma-separated, of " + ", ".join(VARIANTS)
    )
    p.add_argument("--cases", default="all", help="'all', or indices / name parts, comma-separated")
    p.add_argument(
        "--flush", choices=("read", "write"), default="read",
        help="L2 flush before each call: a read (the cupti backend's) or a write",
    )  # fmt: skip
    p.add_argument(
        "--ncu-cache", choices=("all", "none"), default="all",
        help="ncu's --cache-control (none: only our L2 flush, as under CUPTI)",
    )  # fmt: skip
    p.add_argument(
        "--ncu-again", action="store_true",
        help="run ncu once more at the end: its own drift, as one more column",
    )  # fmt: skip
    p.add_argument("--timeout", type=float, default=90.0, help="seconds per variant (ncu: twice)")
    args = p.parse_args(argv)
    variants = [v for v in VARIANTS if v in args.variants.split(",")]
    unknown = set(args.variants.split(",")) - set(VARIANTS)
    if unknown:
        p.error(f"unknown variant(s) {sorted(unknown)}; choose from {', '.join(VARIANTS)}")
    cases = select_cases(args.cases)
    t0 = time.monotonic()
    results: dict[str, VariantResult] = {}
    with tempfile.TemporaryDirectory(prefix="nspy-bench-cupti-acc-") as tmp:
        work = Path(tmp)
        os.environ.setdefault("TRITON_CACHE_DIR", str(work / "triton-cache"))
        for v in sorted(variants, key=lambda v: (v != "kernel", VARIANTS.index(v))):
            results[v] = run_variant(v, work, cases, args)
            sys.stderr.write(
                f"{v}: {results[v].wall_s:.1f} s{' (failed)' if results[v].error else ''}\n"
            )
        if args.ncu_again and "ncu" in variants:  # ncu against itself, minutes later
            results[NCU_AGAIN] = run_variant("ncu", work, cases, args, NCU_AGAIN)
            variants.append(NCU_AGAIN)
    ncu = results.get("ncu") or VariantResult("ncu", error="not run (--variants)")
    others = [results[v] for v in variants if v != "ncu"]
    rows = compare(cases, ncu, others)
    ordered = {v: results[v] for v in variants}
    text = format_table(rows, [o.variant for o in others], ordered)
    sys.stdout.write(
        f"{NCU_METRIC} (ncu) against CUPTI, {args.runs} runs per case after {args.warmup} "
        f"warm-up, L2 flushed by a {args.flush} before each call, ncu --cache-control "
        f"{args.ncu_cache}; medians in ns\n{text}\n"
        f"total {time.monotonic() - t0:.1f} s\n"
    )
    if args.json:
        args.json.write_text(json.dumps(to_json(cases, ordered, rows), indent=1))
    return 0 if any(call_totals(runs) for runs in ncu.samples.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
