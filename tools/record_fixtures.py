"""Record the small real .ncu-rep fixtures that the CPU tests read (tests/data/README.md).

Run it on a GPU host with ncu, torch (CUDA), triton and the `nvtx` package:

    python tools/record_fixtures.py OUT_DIR            # all cases, about a minute
    python tools/record_fixtures.py OUT_DIR --cases one_kernel,range_replay
    python tools/record_fixtures.py OUT_DIR --dry-run  # write the child, print the commands

For each case it writes a child script run as ``ncu <our flags> python child.py CASE``,
with the flags from `nsight_core.collectors.ncu.build_ncu_command` (``--clock-control none``,
``--cache-control all``), so the reports are what our collector produces. The child brackets
every call in an NVTX start/end range of domain "nspy" named by `RunKey.range_name()` and
launches only small Triton kernels (torch only allocates, outside the ranges), which keeps
each report far below 1 MB. Nothing here fakes ncu: the manifest's expectations come from
what the child says it launched, and its ``observed`` part from reading the report back.

Outputs in OUT_DIR: ``<case>.ncu-rep``, ``<case>.ncu.log`` (ncu's real log text, also used by
tests of `classify_ncu_failure`), ``manifest.json``, and ``work/`` (child script and records).
Copy everything except ``work/`` into tests/data/ncu/.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nsight_core.collectors.ncu import (
    build_ncu_command,
    classify_ncu_failure,
    find_ncu,
    ncu_version,
)
from nsight_core.plan.config import EngineConfig
from nsight_core.protocol import NVTX_DOMAIN, RunKey

TIME_METRIC = "gpu__time_duration.sum"
DRAM_METRIC = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
BAD_METRIC = "nspy__no_such_metric.sum"
CASE_TIMEOUT_S = 120
MAX_REPORT_BYTES = 1_000_000


@dataclass(frozen=True)
class Case:
    name: str
    description: str
    metrics: list[str]
    replay_mode: str = "kernel"
    expect_report: bool = True
    expect_error: str | None = None
    foreign: bool = False
    """Recorded with plain ncu flags (no nspy filter), like a report someone else made."""
    notes: dict[str, Any] = field(default_factory=dict)


CASES = [
    Case(
        "one_kernel",
        "two annotations (reference and candidate), one Triton kernel per call, 2 configs x 3 runs",
        [TIME_METRIC],
        notes={"reference": "ref.py:add", "candidates": ["cand.py:add_v2"]},
    ),
    Case(
        "two_kernels",
        "one annotation launching add_kernel then scale_kernel per call, 1 config x 3 runs",
        [TIME_METRIC],
    ),
    Case(
        "range_replay",
        "the two_kernels workload under --replay-mode range: one result per NVTX range",
        [TIME_METRIC],
        replay_mode="range",
    ),
    Case(
        "failed_annotation",
        "boom.py:add_twice raises after one launch in c0:r1; partial.py:add_if_small launches "
        "nothing in config 1; ok.py:add is healthy",
        [TIME_METRIC],
    ),
    Case(
        "two_metrics",
        "a memory-bound copy with a time (ns) and a DRAM throughput (%) metric, 1 config x 3 runs",
        [TIME_METRIC, DRAM_METRIC],
    ),
    Case(
        "count_varies",
        "vary.py:sometimes_twice launches 1, 2, 1 kernels in runs 0..2 of config 0 and 1 per run "
        "in config 1",
        [TIME_METRIC],
    ),
    Case(
        "set_varies",
        "one kernel per call, but not the same one: vary.py:switch launches add_kernel in runs "
        "0 and 2 and scale_kernel in run 1 of config 0, and add_kernel with another grid and "
        "block in run 1 of config 1; steady.py:add launches the same add_kernel every run",
        [TIME_METRIC],
    ),
    Case(
        "foreign",
        "a report made without our flags: default-domain push/pop range 'outer' around "
        "add_kernel + scale_kernel, then copy_kernel outside any range, 3 times",
        [TIME_METRIC],
        foreign=True,
    ),
    Case(
        "bad_metric",
        "an unknown metric name; ncu fails and its log names it (log only, no report expected)",
        [TIME_METRIC, BAD_METRIC],
        expect_report=False,
        expect_error="invalid_metric",
    ),
    Case(
        "no_kernels",
        "ranges in domain nspy with no kernel inside; ncu profiles nothing (log only)",
        [TIME_METRIC],
        expect_report=False,
        expect_error="profiler_error",
    ),
]

# The child runs inside ncu. It must not launch kernels inside ranges other than the ones it
# records, so every tensor is allocated and every kernel compiled before the first range.
CHILD_SOURCE = r'''
"""Fixture workload run under ncu by tools/record_fixtures.py (written by it; do not edit)."""
import json
import sys

import nvtx
import torch
import triton
import triton.language as tl

DOMAIN = "nspy"


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def add_kernel_v2(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, s, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * s, mask=mask)


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


def kname(kernel):
    return getattr(kernel, "fn", kernel).__name__


class Buffers:
    def __init__(self, n):
        self.n = n
        self.x = torch.rand(n, device="cuda")
        self.y = torch.rand(n, device="cuda")
        self.out = torch.empty(n, device="cuda")


def add(b, launched, block=1024):
    add_kernel[(triton.cdiv(b.n, block),)](b.x, b.y, b.out, b.n, BLOCK=block)
    launched.append(kname(add_kernel))


def add_v2(b, launched, block=256):
    add_kernel_v2[(triton.cdiv(b.n, block),)](b.x, b.y, b.out, b.n, BLOCK=block)
    launched.append(kname(add_kernel_v2))


def scale(b, launched, block=1024):
    scale_kernel[(triton.cdiv(b.n, block),)](b.out, b.x, b.n, 0.5, BLOCK=block)
    launched.append(kname(scale_kernel))


def copy(b, launched, block=1024):
    copy_kernel[(triton.cdiv(b.n, block),)](b.x, b.out, b.n, BLOCK=block)
    launched.append(kname(copy_kernel))


class Recorder:
    def __init__(self):
        self.keys = []
        self.foreign = []

    def call(self, annotation, config_id, run, body):
        name = f"c{config_id}:r{run}:{annotation}"
        entry = {"annotation": annotation, "config_id": config_id, "run": run,
                 "range_name": name, "launched": [], "error": None}
        self.keys.append(entry)
        rid = nvtx.start_range(message=name, domain=DOMAIN)
        try:
            body(entry["launched"])
        except Exception as exc:  # recorded like the worker's FailureEvent would
            entry["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            nvtx.end_range(rid)
        torch.cuda.synchronize()


def warm(bufs):
    sink = []
    for b in bufs:
        for fn in (add, add_v2, scale, copy):
            fn(b, sink)
    torch.cuda.synchronize()


def add_twice_failing(b, config_id, run):
    def body(launched):
        add(b, launched)
        if config_id == 0 and run == 1:
            raise RuntimeError("planned failure after one launch")
        add(b, launched)
    return body


def case_one_kernel(rec, runs):
    configs = [{"n": 4096}, {"n": 1 << 20}]
    bufs = [Buffers(c["n"]) for c in configs]
    warm(bufs)
    for cid, b in enumerate(bufs):
        for ann, fn in (("ref.py:add", add), ("cand.py:add_v2", add_v2)):
            for r in range(runs):
                rec.call(ann, cid, r, lambda launched, b=b, fn=fn: fn(b, launched))
    return configs


def case_two_kernels(rec, runs):
    configs = [{"n": 1 << 16}]
    b = Buffers(configs[0]["n"])
    warm([b])
    for r in range(runs):
        rec.call("two.py:add_then_scale", 0, r, lambda launched: (add(b, launched), scale(b, launched)))
    return configs


def case_failed_annotation(rec, runs):
    configs = [{"n": 4096}, {"n": 1 << 14}]
    bufs = [Buffers(c["n"]) for c in configs]
    warm(bufs)
    for cid, b in enumerate(bufs):
        for r in range(runs):
            rec.call("ok.py:add", cid, r, lambda launched, b=b: add(b, launched))
        for r in range(runs):
            rec.call("boom.py:add_twice", cid, r, add_twice_failing(b, cid, r))
        for r in range(runs):
            rec.call("partial.py:add_if_small", cid, r,
                     lambda launched, b=b, cid=cid: add(b, launched) if cid == 0 else None)
    return configs


def case_two_metrics(rec, runs):
    configs = [{"n": 1 << 24}]
    b = Buffers(configs[0]["n"])
    warm([b])
    for r in range(runs):
        rec.call("copy.py:copy", 0, r, lambda launched: copy(b, launched))
    return configs


def case_count_varies(rec, runs):
    configs = [{"n": 4096}, {"n": 1 << 14}]
    bufs = [Buffers(c["n"]) for c in configs]
    warm(bufs)

    def body(b, cid, r):
        def run(launched):
            add(b, launched)
            if cid == 0 and r == 1:
                scale(b, launched)
        return run

    for cid, b in enumerate(bufs):
        for r in range(runs):
            rec.call("vary.py:sometimes_twice", cid, r, body(b, cid, r))
    return configs


def case_set_varies(rec, runs):
    configs = [{"n": 4096}, {"n": 1 << 14}]
    bufs = [Buffers(c["n"]) for c in configs]
    warm(bufs)
    add(bufs[1], [], block=256)  # compiled before any range, like the others
    torch.cuda.synchronize()

    def body(b, cid, r):
        def run(launched):
            if r % 2 == 0:
                add(b, launched)
            elif cid == 0:
                scale(b, launched)
            else:
                add(b, launched, block=256)
        return run

    for cid, b in enumerate(bufs):
        for r in range(runs):
            rec.call("steady.py:add", cid, r, lambda launched, b=b: add(b, launched))
        for r in range(runs):
            rec.call("vary.py:switch", cid, r, body(b, cid, r))
    return configs


def case_no_kernels(rec, runs):
    configs = [{"n": 4096}]
    warm([Buffers(4096)])
    for r in range(runs):
        rec.call("idle.py:nothing", 0, r, lambda launched: None)
    return configs


def case_foreign(rec, runs):
    configs = [{"n": 1 << 14}]
    b = Buffers(configs[0]["n"])
    sink = []
    for _ in range(runs):
        nvtx.push_range("outer")
        add(b, sink)
        scale(b, sink)
        nvtx.pop_range()
        copy(b, sink)
        rec.foreign += [["outer", kname(add_kernel)], ["outer", kname(scale_kernel)],
                        [None, kname(copy_kernel)]]
    torch.cuda.synchronize()
    return configs


CASES = {
    "foreign": case_foreign,
    "one_kernel": case_one_kernel,
    "two_kernels": case_two_kernels,
    "range_replay": case_two_kernels,
    "failed_annotation": case_failed_annotation,
    "two_metrics": case_two_metrics,
    "count_varies": case_count_varies,
    "set_varies": case_set_varies,
    "bad_metric": case_one_kernel,
    "no_kernels": case_no_kernels,
}


def main():
    case, out, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rec = Recorder()
    configs = CASES[case](rec, runs)
    info = {"case": case, "runs": runs, "configs": configs, "keys": rec.keys,
            "foreign_launches": rec.foreign,
            "torch": torch.__version__, "triton": triton.__version__,
            "device": torch.cuda.get_device_name(0)}
    with open(out, "w") as f:
        json.dump(info, f, indent=1)


if __name__ == "__main__":
    main()
'''


def _load_report_summary(report: Path) -> dict[str, Any]:
    """What the report holds, read with ncu_report directly (independent of extract.py)."""
    import ncu_report

    ctx = ncu_report.load_report(str(report))
    actions: list[dict[str, Any]] = []
    gpu = None
    for rng in ctx:
        for i in range(len(rng)):
            act = rng[i]
            ranges = []
            state = act.nvtx_state()
            if state is not None:
                for dom_id in state.domains():
                    dom = state.domain_by_id(dom_id)
                    ranges += [f"{dom.name()}@{n}" for n in dom.start_end_ranges()]
                    ranges += [f"{dom.name()}@{n}/" for n in dom.push_pop_ranges()]
            name_metric = act.metric_by_name("device__attribute_display_name")
            if gpu is None and name_metric is not None:
                gpu = name_metric.value()
            actions.append(
                {
                    "name": act.name(),
                    "workload_type": int(act.workload_type()),
                    "nvtx": ranges,
                }
            )
    return {"gpu": gpu, "actions": actions}


def _observed_by_key(summary: dict[str, Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    prefix = f"{NVTX_DOMAIN}@"
    for act in summary["actions"]:
        names = [r[len(prefix) :] for r in act["nvtx"] if r.startswith(prefix)]
        keys = [k for k in (RunKey.from_range_name(n) for n in names) if k is not None]
        label = keys[0].range_name() if len(keys) == 1 else f"<{len(keys)} nspy ranges>"
        out.setdefault(label, []).append(act["name"])
    return out


def _expected_by_key(child: dict[str, Any], replay_mode: str) -> list[dict[str, Any]]:
    rows = []
    for k in child["keys"]:
        launched = list(k["launched"])
        kernels = ["range"] if replay_mode == "range" and launched else launched
        rows.append({**k, "kernels": kernels})
    return rows


def _foreign_command(
    ncu: str, metrics: list[str], report: Path, log: Path, target: list[str]
) -> list[str]:
    """Plain ncu flags; the kernel-name filter keeps torch's own kernels (megabytes) out."""
    return [
        ncu, "--nvtx", "--metrics", ",".join(metrics), "--cache-control", "all",
        "--clock-control", "none", "-k", "regex:(add|scale|copy)_kernel",
        "--log-file", str(log), "-f", "-o", str(report), *target,
    ]  # fmt: skip


def _foreign_expected(launches: list[list[Any]]) -> list[dict[str, Any]]:
    """Annotation per launch as `nspy-mcp report` names foreign results (report_cmd.py)."""
    kernels_in: dict[str, set[str]] = {}
    for label, kernel in launches:
        if label is not None:
            kernels_in.setdefault(label, set()).add(kernel)
    out = []
    for label, kernel in launches:
        if label is None:
            annotation = kernel
        elif len(kernels_in[label]) > 1:
            annotation = f"{label}: {kernel}"
        else:
            annotation = label
        out.append({"range": label, "kernel": kernel, "annotation": annotation})
    return out


def record_case(case: Case, ncu: str, out: Path, child: Path, runs: int) -> dict[str, Any]:
    work = out / "work"
    report = out / f"{case.name}.ncu-rep"
    log = out / f"{case.name}.ncu.log"
    record = work / f"{case.name}.child.json"
    for stale in (report, log, record):
        stale.unlink(missing_ok=True)
    target = [sys.executable, str(child), case.name, str(record), str(runs)]
    if case.foreign:
        cmd = _foreign_command(ncu, case.metrics, report, log, target)
    else:
        cmd = build_ncu_command(
            ncu,
            metrics=case.metrics,
            cache_control="all",
            clock_control="none",
            replay_mode=case.replay_mode,
            report_path=report,
            log_path=log,
            target_argv=target,
        )
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CASE_TIMEOUT_S, check=False)
    wall = time.monotonic() - t0
    log_text = log.read_text(errors="replace") if log.exists() else ""
    err = classify_ncu_failure(proc.returncode, log_text, report.exists(), metrics=case.metrics)
    entry: dict[str, Any] = {
        "description": case.description,
        "report": report.name if report.exists() else None,
        "log": log.name if log.exists() else None,
        "metrics": case.metrics,
        "replay_mode": case.replay_mode,
        "command": [Path(cmd[0]).name, *cmd[1:]],
        "exit_code": proc.returncode,
        "wall_s": round(wall, 2),
        "classified": None if err is None else err.to_dict(),
        **case.notes,
    }
    if record.exists():
        child_info = json.loads(record.read_text())
        entry["configs"] = child_info["configs"]
        entry["runs"] = child_info["runs"]
        entry["expected"] = _expected_by_key(child_info, case.replay_mode)
        entry["failed_runs"] = [
            {
                "annotation": k["annotation"],
                "config_id": k["config_id"],
                "run": k["run"],
                "error_class": "runtime_error",
                "error": k["error"],
            }
            for k in child_info["keys"]
            if k["error"]
        ]
        entry["child"] = {x: child_info[x] for x in ("torch", "triton", "device")}
        if case.foreign:
            entry["expected_foreign"] = _foreign_expected(child_info["foreign_launches"])
    if report.exists():
        entry["size_bytes"] = report.stat().st_size
        summary = _load_report_summary(report)
        entry["gpu"] = summary["gpu"]
        entry["observed"] = _observed_by_key(summary)
        entry["actions"] = summary["actions"]
    entry["ok"] = _case_ok(case, entry)
    if proc.returncode != 0 or not entry["ok"]:
        entry["stderr_tail"] = proc.stderr[-2000:]
    return entry


def _case_ok(case: Case, entry: dict[str, Any]) -> bool:
    if not case.expect_report:
        got = entry["classified"]
        return got is not None and got["error_class"] == case.expect_error
    if entry["report"] is None or "expected" not in entry:
        return False
    if case.foreign:
        names = [a["name"] for a in entry["actions"]]
        return names == [e["kernel"] for e in entry["expected_foreign"]]
    if entry.get("size_bytes", 0) > MAX_REPORT_BYTES:
        return False
    observed = entry["observed"]
    for k in entry["expected"]:
        seen = observed.get(k["range_name"], [])
        if case.replay_mode == "range":
            # Range results are named by ncu, not by us; one result per range is the check.
            if len(seen) != len(k["kernels"]):
                return False
        elif seen != k["kernels"]:
            return False
    return all(label.startswith("c") for label in observed)


def _summary_table(manifest: dict[str, Any]) -> str:
    lines = [f"{'case':<18} {'ok':<4} {'exit':>4} {'keys':>4} {'actions':>7} {'bytes':>9} {'s':>6}"]
    for name, e in manifest["cases"].items():
        actions = sum(len(v) for v in e.get("observed", {}).values())
        lines.append(
            f"{name:<18} {'yes' if e['ok'] else 'NO':<4} {e['exit_code']:>4} "
            f"{len(e.get('expected', [])):>4} {actions:>7} {e.get('size_bytes', 0):>9} "
            f"{e['wall_s']:>6}"
        )
        if e["classified"]:
            lines.append(
                f"{'':<18} -> {e['classified']['error_class']}: {e['classified']['message']}"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Record the .ncu-rep fixtures of tests/data/ncu/.")
    p.add_argument("out", type=Path, help="output directory (created)")
    p.add_argument("--ncu", default=None, help="ncu executable (default: $NSPY_NCU or PATH)")
    p.add_argument(
        "--cases",
        default=None,
        help="comma-separated subset of: " + ", ".join(c.name for c in CASES),
    )
    p.add_argument("--runs", type=int, default=3, help="runs per config (default 3)")
    p.add_argument("--dry-run", action="store_true", help="write the child; print the commands")
    args = p.parse_args(argv)

    wanted = [c for c in CASES if args.cases is None or c.name in args.cases.split(",")]
    ncu = args.ncu or find_ncu(EngineConfig.from_env())
    if ncu is None:
        sys.stderr.write("no ncu found: put it on PATH, set NSPY_NCU, or pass --ncu\n")
        return 2
    out: Path = args.out.resolve()
    (out / "work").mkdir(parents=True, exist_ok=True)
    child = out / "work" / "fixture_child.py"
    child.write_text(CHILD_SOURCE.lstrip())
    if args.dry_run:
        for case in wanted:
            cmd = build_ncu_command(
                ncu,
                metrics=case.metrics,
                cache_control="all",
                clock_control="none",
                replay_mode=case.replay_mode,
                report_path=out / f"{case.name}.ncu-rep",
                log_path=out / f"{case.name}.ncu.log",
                target_argv=[sys.executable, str(child), case.name, "record.json", str(args.runs)],
            )
            sys.stdout.write(" ".join(cmd) + "\n")
        return 0

    manifest_path = out / "manifest.json"
    manifest: dict[str, Any] = (
        json.loads(manifest_path.read_text()) if manifest_path.exists() else {"cases": {}}
    )
    manifest["recorded_with"] = {
        "ncu": ncu_version(ncu),
        "python": platform.python_version(),
        "host_os": platform.platform(),
        "date": time.strftime("%Y-%m-%d"),
        "nvtx_domain": NVTX_DOMAIN,
        "clock_control": "none",
        "cache_control": "all",
        "tool": "tools/record_fixtures.py",
    }
    t0 = time.monotonic()
    for case in wanted:
        try:
            manifest["cases"][case.name] = record_case(case, ncu, out, child, args.runs)
        except subprocess.TimeoutExpired:
            manifest["cases"][case.name] = {
                "ok": False,
                "exit_code": -1,
                "wall_s": CASE_TIMEOUT_S,
                "classified": None,
                "error": "timed out",
            }
        manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    sys.stdout.write(_summary_table(manifest))
    sys.stdout.write(f"total {time.monotonic() - t0:.1f} s; manifest: {manifest_path}\n")
    return 0 if all(manifest["cases"][c.name]["ok"] for c in wanted) else 1


if __name__ == "__main__":
    sys.exit(main())
