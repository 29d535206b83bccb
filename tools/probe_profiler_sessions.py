#!/usr/bin/env python3
"""Which of our processes may be alive on a GPU while a new ncu process profiles there.

    python tools/probe_profiler_sessions.py [--json OUT]

Issue 41 saw the first ncu job whose settings differed from an earlier job's fail with
"a driver resource was unavailable" while a pre-started contestant of the earlier settings
waited under ncu. This script tests that cause directly, without our server: a *holder*
process is started (under ncu, under CUPTI activity tracing, or plain), made to reach the
state a waiting contestant is in, and then a second process is profiled by ncu on the same
GPU. Each case prints whether the second ncu run profiled its kernel, the holder's own fate
when it launches a kernel afterwards, and ncu's error lines. Needs a GPU, ncu and torch;
every process has a time limit and is killed with its process group.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

HOLDER = r"""
import sys, torch
mode = sys.argv[1]
if mode == "cupti":
    from cupti import cupti
    cupti.activity_register_callbacks(lambda: (1 << 20, 0), lambda acts: None)
    cupti.activity_enable(cupti.ActivityKind.CONCURRENT_KERNEL)
torch.cuda.init()
x = torch.empty(1024, device="cuda")  # a context, no kernel
if mode != "context":
    x.fill_(1.0)
    torch.cuda.synchronize()
print("held", flush=True)
sys.stdin.readline()
(x * 3).sum().item()
torch.cuda.synchronize()
print("after", flush=True)
"""

TARGET = r"""
import torch
x = torch.ones(1 << 20, device="cuda")
print(float((x * 2).sum()), flush=True)
"""

LIMIT_S = 120.0
SECOND_LIMIT_S = 15.0
"""A second ncu run that waits this long for the profiler is reported as waiting."""


@dataclass
class Case:
    name: str
    holder: str  # "none", "ncu:<metric>", "cupti", "plain"
    holder_mode: str  # "kernel" | "context"
    second: str  # "ncu:<metric>" | "cupti"
    own_tmpdir: bool = False
    """The second process gets a TMPDIR of its own, as each of our sandboxed jobs does."""
    second_ok: bool = False
    second_errors: list[str] = field(default_factory=list)
    holder_after_ok: bool | None = None
    holder_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0


def ncu_argv(ncu: str, metric: str, out: Path, name: str, target: list[str]) -> list[str]:
    return [
        ncu, "--metrics", metric, "--target-processes", "all",
        "--log-file", str(out / f"{name}.log"), "-f", "-o", str(out / name), *target,
    ]  # fmt: skip


def error_lines(path: Path) -> list[str]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ["(no log)"]
    return [ln.strip() for ln in text.splitlines() if "==ERROR==" in ln][:4]


def spawn(argv: list[str], **kw: object) -> subprocess.Popen[str]:
    return subprocess.Popen(argv, text=True, start_new_session=True, **kw)  # type: ignore[call-overload, no-any-return]


def kill(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run_case(case: Case, ncu: str, out: Path) -> Case:
    t0 = time.monotonic()
    py = sys.executable
    holder: subprocess.Popen[str] | None = None
    hname = f"{case.name}-holder"
    if case.holder != "none":
        argv = [py, "-c", HOLDER, "cupti" if case.holder == "cupti" else case.holder_mode]
        if case.holder.startswith("ncu:"):
            argv = ncu_argv(ncu, case.holder[4:], out, hname, argv)
        holder = spawn(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert holder.stdout is not None
        line = holder.stdout.readline().strip()
        if line != "held":
            case.holder_errors = [
                f"holder did not start: {line!r}",
                *error_lines(out / f"{hname}.log"),
            ]
            kill(holder)
            return case
    sname = f"{case.name}-second"
    try:
        if case.second.startswith("ncu:"):
            argv = ncu_argv(ncu, case.second[4:], out, sname, [py, "-c", TARGET])
            env = dict(os.environ)
            if case.own_tmpdir:
                env["TMPDIR"] = tempfile.mkdtemp(prefix="second-", dir=out)
            second = spawn(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            try:
                second.wait(timeout=SECOND_LIMIT_S)
            except subprocess.TimeoutExpired:
                case.second_errors = [f"still waiting after {SECOND_LIMIT_S:.0f} s (killed)"]
            kill(second)
            case.second_errors += error_lines(out / f"{sname}.log")
            case.second_ok = (
                second.returncode == 0
                and not case.second_errors
                and (out / f"{sname}.ncu-rep").exists()
            )
        else:
            done = subprocess.run([py, "-c", HOLDER.replace("sys.stdin.readline()", "pass"), "cupti"],
                                  capture_output=True, text=True, timeout=LIMIT_S, start_new_session=True)  # fmt: skip
            case.second_ok = done.returncode == 0 and "after" in done.stdout
            case.second_errors = done.stderr.strip().splitlines()[-3:] if not case.second_ok else []
    finally:
        if holder is not None:
            assert holder.stdin is not None and holder.stdout is not None
            try:
                holder.stdin.write("go\n")
                holder.stdin.flush()
                case.holder_after_ok = holder.stdout.readline().strip() == "after"
                holder.wait(timeout=LIMIT_S)
            except (OSError, subprocess.TimeoutExpired):
                case.holder_after_ok = False
            kill(holder)
            if case.holder.startswith("ncu:"):
                case.holder_errors = error_lines(out / f"{hname}.log")
    case.seconds = round(time.monotonic() - t0, 2)
    return case


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, help="also write the cases here")
    args = ap.parse_args()
    ncu = os.environ.get("NSPY_NCU") or shutil.which("ncu")
    if ncu is None:
        print("ncu not found", file=sys.stderr)
        return 2
    a, b = "gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed"
    cases = [
        Case("control", "none", "kernel", f"ncu:{b}"),
        Case("ncu-kernel-other", f"ncu:{a}", "kernel", f"ncu:{b}"),
        Case("ncu-kernel-other-tmp", f"ncu:{a}", "kernel", f"ncu:{b}", own_tmpdir=True),
        Case("ncu-kernel-same", f"ncu:{a}", "kernel", f"ncu:{a}"),
        Case("ncu-context-other", f"ncu:{a}", "context", f"ncu:{b}"),
        Case("cupti-then-ncu", "cupti", "kernel", f"ncu:{b}"),
        Case("plain-then-ncu", "plain", "kernel", f"ncu:{b}"),
        Case("ncu-then-cupti", f"ncu:{a}", "kernel", "cupti"),
        Case("control-after", "none", "kernel", f"ncu:{b}"),
    ]
    out = Path(tempfile.mkdtemp(prefix="nspy-probe-"))
    results = []
    for case in cases:
        run_case(case, ncu, out)
        results.append(asdict(case))
        print(
            f"{case.name:20s} holder={case.holder:28s} second={case.second:50s} "
            f"second_ok={case.second_ok} holder_after_ok={case.holder_after_ok} "
            f"{case.seconds:6.2f}s {case.second_errors or ''} {case.holder_errors or ''}",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
