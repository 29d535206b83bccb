"""An agent's session, for the soak tests: one server, the requests an optimizing agent sends.

Issue 41: every request of a session worked alone and the sequence broke (the first ncu job
whose settings differed from an earlier one's found the GPU's profiler held by our own
pre-started contestant). So the unit here is a session: metric and setting changes,
`diagnose`, `stages`, the backends in turn, several candidates, a wrong one, a hang, a
cancel, a bad request and a restart of the server on the same store. `run_session` drives it
through the real MCP client over stdio and returns what went wrong (empty: nothing); the CPU
test (tests/mcp/test_session_soak.py) and the GPU test (tests/gpu/test_session_soak_gpu.py)
run it with the backends their host has.
"""

from __future__ import annotations

import contextlib
import os
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

STEP_LIMIT_S = 300.0
"""No step of a session may take longer (a hang is its own candidate's 15 s limit)."""
HANG_LIMIT_S = 15

_TRUSTED = """
import {xp_import}

def make_inputs(rows, cols):
    {make}

def softmax(x):
    e = {xp}.exp(x - x.max({axis}=1, keepdims=True){values})
    return e / e.sum({axis}=1, keepdims=True)
"""

_CANDIDATES = """
import time
import {xp_import}

def fused(x):
    {fused}

def shifted(x):
    m = x.max({axis}=1, keepdims=True){values}
    e = {xp}.exp(x - m)
    return e / e.sum({axis}=1, keepdims=True)

def two_pass(x):
    e = {xp}.exp(x - x.max({axis}=1, keepdims=True){values})
    s = e.sum({axis}=1, keepdims=True)
    return e * (1.0 / s)

def via_log(x):
    {via_log}

def wrong_axis(x):
    e = {xp}.exp(x - x.max({axis}=0, keepdims=True){values})
    return e / e.sum({axis}=0, keepdims=True)

def hangs(x):
    time.sleep(3600)
    return x
"""

_NUMPY = {
    "xp_import": "numpy as np",
    "xp": "np",
    "axis": "axis",
    "values": "",
    "make": "return (np.random.standard_normal((rows, cols)).astype(np.float32),)",
    "fused": "return shifted(x)",
    "via_log": "m = x.max(axis=1, keepdims=True)\n"
    "    return np.exp(x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True)))",
}
_TORCH = {
    "xp_import": "torch",
    "xp": "torch",
    "axis": "dim",
    "values": ".values",
    "make": 'return (torch.randn(rows, cols, device="cuda"),)',
    "fused": "return torch.softmax(x, dim=1)",
    "via_log": "return torch.log_softmax(x, dim=1).exp()",
}


def write_kernels(folder: Path, *, gpu: bool) -> Path:
    """The session's reference (ref.py) and candidates (cands.py) in ``folder``: numpy on a
    CPU host, torch on CUDA on a GPU host."""
    fill = _TORCH if gpu else _NUMPY
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ref.py").write_text(textwrap.dedent(_TRUSTED.format(**fill)))
    (folder / "cands.py").write_text(textwrap.dedent(_CANDIDATES.format(**fill)))
    return folder


@dataclass(frozen=True)
class Step:
    name: str
    tool: str
    args: dict[str, Any]
    expect: Callable[[CallToolResult, dict[str, Any]], str | None]
    """What went wrong with the answer (None: it is what the step should get)."""


@dataclass
class Log:
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    result_ids: list[str] = field(default_factory=list)

    def next(self) -> int:
        """The number of the next request's line (the restart's line is not a request)."""
        return 1 + sum(line.startswith("[") for line in self.lines)

    @property
    def requests(self) -> int:
        return sum(line.startswith("[") for line in self.lines)

    def say(self, line: str) -> None:
        self.lines.append(line)
        sys.stderr.write(line + "\n")


def answer(result: CallToolResult) -> dict[str, Any]:
    return dict(result.structured_content or {})


def text(result: CallToolResult) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


def profiler_errors(got: dict[str, Any]) -> list[str]:
    """Every profiler_error in an answer: its job's, its candidates', its rows'."""
    found = []
    error = got.get("error") or {}
    if error.get("ErrorClass") == "profiler_error":
        found.append(str(error.get("Error")))
    for item in [*got.get("failures", []), *got.get("rows", [])]:
        if item.get("ErrorClass") == "profiler_error":
            found.append(str(item.get("Error")))
    for stage in got.get("stages") or []:
        if stage.get("ErrorClass") == "profiler_error":
            found.append(str(stage.get("Error")))
    return found


def done_and_trusted(min_rows: int = 1) -> Callable[[CallToolResult, dict[str, Any]], str | None]:
    def check(result: CallToolResult, got: dict[str, Any]) -> str | None:
        if result.is_error:
            return f"a tool error: {text(result)[:300]}"
        if got.get("status") != "done":
            return f"status {got.get('status')}: {str(got.get('message'))[:300]}"
        rows = got.get("rows", [])
        bad = [r for r in rows if r.get("Trust") in ("suspicious", "failed")]
        if len(rows) < min_rows or bad:
            return f"{len(rows)} rows, not trusted: {[r.get('Reasons') for r in bad][:2]}"
        return None

    return check


def refused_with(*words: str) -> Callable[[CallToolResult, dict[str, Any]], str | None]:
    """A tool error, or an answer that failed before it ran, whose text names ``words``."""

    def check(result: CallToolResult, got: dict[str, Any]) -> str | None:
        said = text(result) if result.is_error else str(got.get("message", ""))
        if not result.is_error and got.get("status") not in ("failed", "refused"):
            return f"not refused: {got.get('status')}"
        missing = [w for w in words if w.lower() not in said.lower()]
        return f"the refusal does not name {missing}: {said[:300]}" if missing else None

    return check


def candidate_failed(cls: str, who: str) -> Callable[[CallToolResult, dict[str, Any]], str | None]:
    """The job ended (done or failed) and names ``who``'s failure as ``cls``."""

    def check(result: CallToolResult, got: dict[str, Any]) -> str | None:
        if result.is_error:
            return f"a tool error: {text(result)[:300]}"
        if got.get("status") not in ("done", "failed"):
            return f"status {got.get('status')}"
        named = [
            f
            for f in [*got.get("failures", []), *got.get("correctness", [])]
            if who in str(f.get("Annotation", "")) and cls in str(f.get("ErrorClass", ""))
        ]
        if not named and cls not in str((got.get("error") or {}).get("ErrorClass")):
            return f"{who} not named {cls}: {str(got.get('message'))[:300]}"
        return None

    return check


def any_answer(result: CallToolResult, got: dict[str, Any]) -> str | None:
    return f"a tool error: {text(result)[:300]}" if result.is_error else None


def agent_session(k: Path, backends: tuple[str, ...], *, gpu: bool) -> list[Step]:
    """The requests of one session, in order. ``backends``: those that work on this host
    (the others are asked for too and must be refused with the backend named)."""
    ref, cands = f"{k}/ref.py", f"{k}/cands.py"
    shape = {"rows": 1024, "cols": 1024} if gpu else {"rows": 64, "cols": 128}

    def req(backend: str, names: tuple[str, ...] = ("fused",), **kw: Any) -> dict[str, Any]:
        r: dict[str, Any] = {
            "reference": f"{ref}:softmax",
            "candidates": [f"{cands}:{n}" for n in names],
            "inputs": f"{ref}:make_inputs",
            "configs": [shape],
            "backend": backend,
            "runs": 3,
            "check": {"seeds": 1},
            "kernels": {"combine": "sum"} if gpu else {},
        }
        r.update(kw)
        return r

    def profile(name: str, request: dict[str, Any], expect: Any = None) -> Step:
        needed = {request["backend"], (request.get("stages") or {}).get("screen", "events")}
        missing = sorted(needed - set(backends))
        if missing:  # a backend this host lacks: refused, naming it
            expect = refused_with(missing[0])
        return Step(name, "profile_candidates", {"request": request}, expect or done_and_trusted())

    two = ["gpu__time_duration.sum", "dram__bytes.sum"]
    one = ["gpu__time_duration.sum"]
    many = ("fused", "shifted", "two_pass", "via_log")
    screen = "cupti" if gpu else "events"
    steps = [
        Step("check_environment", "check_environment", {}, any_answer),
        Step("validate_metrics", "validate_metrics", {"metrics": two}, any_answer),
        profile("ncu, 2 metrics", req("ncu", metrics=two)),
        profile("ncu, 2 metrics again", req("ncu", metrics=two)),
        profile("events, 20 runs", req("events", runs=20)),
        profile("ncu, 1 metric", req("ncu", metrics=one)),
        profile("ncu, 1 metric, 4 candidates", req("ncu", many, metrics=one)),
        profile("cupti", req("cupti")),
        profile("cupti again", req("cupti", many)),
        profile("ncu, 2 metrics, 4 candidates", req("ncu", many, metrics=two)),
        profile(
            "staged: screen, ncu on the top 2",
            req("ncu", many, metrics=one, stages={"screen": screen, "top_k": 2}),
        ),
        profile("ncu, diagnose", req("ncu", diagnose=True)),
        profile("events, 4 candidates", req("events", many)),
        profile("ncu, cache_control none", req("ncu", metrics=one, cache_control="none")),
        profile("events, 2 configs", req("events", configs=[shape, {**shape, "rows": 32}])),
        profile(
            "a wrong candidate beside a right one",
            req(backends[-1], ("fused", "wrong_axis")),
            expect=candidate_failed("incorrect", "wrong_axis"),
        ),
        profile(
            "a candidate that hangs",
            req(backends[-1], ("hangs",), time_limit_s=HANG_LIMIT_S),
            expect=candidate_failed("timeout", "hangs"),
        ),
        Step(
            "a misspelled metric",
            "profile_candidates",
            {"request": req("ncu", metrics=["gpu__time_durration.sum"])},
            refused_with("gpu__time_durration" if "ncu" in backends else "ncu"),
        ),
        Step(
            "a missing file",
            "profile_candidates",
            {"request": req("events") | {"candidates": [f"{k}/nope.py:fused"]}},
            refused_with("nope.py"),
        ),
        profile("cupti, 4 candidates", req("cupti", many)),
        profile("ncu, 1 metric once more", req("ncu", metrics=one)),
        profile("events again", req("events")),
        profile("ncu, diagnose, 2 candidates", req("ncu", ("fused", "shifted"), diagnose=True)),
        profile("ncu, 2 metrics, last", req("ncu", metrics=two)),
    ]
    return steps


async def _call(client: Client, step: Step, log: Log) -> None:
    t0 = time.monotonic()
    with anyio.fail_after(STEP_LIMIT_S):
        result = await client.call_tool(step.tool, step.args)
    got = answer(result)
    problem = step.expect(result, got)
    held = profiler_errors(got)
    if held:
        problem = (problem + "; " if problem else "") + f"profiler_error: {held[0][:300]}"
    if got.get("result_id"):
        log.result_ids.append(str(got["result_id"]))
    status = "error" if result.is_error else got.get("status", "ok")
    line = f"[{log.next():2d}] {step.name}: {status} in {time.monotonic() - t0:.1f} s"
    if problem:
        log.problems.append(f"{step.name}: {problem}")
        line += f"  PROBLEM: {problem}"
    log.say(line)


async def _cancel_one(client: Client, k: Path, backend: str, log: Log) -> None:
    """A job that hangs, answered `running` at once, then cancelled through read_results."""
    request = {
        "reference": f"{k}/ref.py:softmax",
        "candidates": [f"{k}/cands.py:hangs"],
        "inputs": f"{k}/ref.py:make_inputs",
        "configs": [{"rows": 8, "cols": 16}],
        "backend": backend,
        "runs": 1,
        "check": {"seeds": 1},
        "wait_s": 0,
    }
    t0 = time.monotonic()
    got = answer(await client.call_tool("profile_candidates", {"request": request}))
    rid = str(got.get("result_id"))
    await anyio.sleep(2.0)
    with anyio.fail_after(STEP_LIMIT_S):
        res = await client.call_tool("read_results", {"result_id": rid, "cancel": True})
    ended = answer(res).get("result") or {}
    problem = (
        None if ended.get("status") == "cancelled" else f"not cancelled: {ended.get('status')}"
    )
    line = f"[{log.next():2d}] cancel a running job: {ended.get('status')} in {time.monotonic() - t0:.1f} s"
    if problem:
        log.problems.append(f"cancel: {problem}")
        line += f"  PROBLEM: {problem}"
    log.say(line)


async def _nothing_running(client: Client, log: Log) -> None:
    got = answer(await client.call_tool("read_results", {"limit": 100}))
    running = [r for r in got.get("results", []) if r.get("status") in ("running", "queued")]
    line = f"[{log.next():2d}] read_results listing: {len(got.get('results', []))} results"
    if running:
        log.problems.append(f"jobs left running: {running}")
        line += f"  PROBLEM: {len(running)} still running"
    log.say(line)


def server(store: Path, env: dict[str, str]) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "nspy_mcp", "serve", "--store", str(store)], env=env
    )


async def run_session(
    folder: Path, backends: tuple[str, ...], *, gpu: bool, env: dict[str, str] | None = None
) -> Log:
    """Drive one server through the session, restart it on the same store, and go on; the
    log's problems say what went wrong."""
    k = write_kernels(folder / "kernels", gpu=gpu)
    store = folder / "store"
    env = {**os.environ, **(env or {})}
    env.pop("NSPY_MCP_STANDBY", None)  # pre-started judges on, as a user has them
    log = Log()
    steps = agent_session(k, backends, gpu=gpu)
    async with Client(server(store, env)) as client:
        for step in steps:
            await _call(client, step, log)
        await _cancel_one(client, k, backends[-1], log)
        await _nothing_running(client, log)
    log.say("-- the server is restarted on the same store")
    async with Client(server(store, env)) as client:
        first = log.result_ids[0] if log.result_ids else ""
        await _call(
            client,
            Step("read an earlier result", "read_results", {"result_id": first}, any_answer),
            log,
        )
        for step in steps[2:6]:
            await _call(client, step, log)
        await _nothing_running(client, log)
    return log


def leftovers(under: Path, within_s: float = 20.0) -> list[str]:
    """Our judges and contestants whose command names a path in ``under`` (the session's
    temporary folder), still running ``within_s`` seconds after the client left."""
    deadline = time.monotonic() + within_s
    found: list[str] = []
    while time.monotonic() < deadline:
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                ours = any(
                    m in argv for m in (b"nsight_core.judge.boot", b"nsight_core.contestant")
                )
                if ours and any(a.startswith(str(under).encode()) for a in argv):
                    found.append(f"{entry.name} {b' '.join(argv)[:120].decode(errors='replace')}")
        if not found:
            return []
        time.sleep(0.2)
    return found
