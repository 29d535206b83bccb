"""`nspy-mcp demo`: the whole agent loop, driven through a real MCP client over stdio.

It starts ``python -m nspy_mcp serve`` as a subprocess, exactly as an MCP client would, and
calls check_environment -> validate_metrics -> profile_candidates -> read_results on the
softmax kernels of `nspy_mcp.demo_kernels`: a trusted reference, a correct faster candidate
and a deliberately wrong one, so the answer shows an 'incorrect' verdict too.

Where torch sees a CUDA GPU, the torch variants are profiled (with ncu when it works here,
else with CUDA events); anywhere else the numpy variants run on the CPU under the events
backend, and the demo says why. This is the CLI, so it writes a short summary to stdout;
the server it starts keeps stdout for the protocol.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

from nsight_core.host.catalog import MetricsValidation
from nsight_core.host.probe import EnvironmentReport
from nsight_core.request import DEFAULT_METRIC
from nsight_core.results import ProfileResult

DEMO_CONFIGS: list[dict[str, Any]] = [{"rows": 256, "cols": 256}, {"rows": 1024, "cols": 256}]
DEMO_RUNS = 10
WAIT_S = 120.0


class DemoError(Exception):
    """The demo cannot go on; the text says why and what to do."""


@dataclass(frozen=True)
class Plan:
    """Which backend and which kernels the demo profiles here, and why."""

    backend: str
    kernels: str  # "numpy" | "torch"
    why: str

    def request(self) -> dict[str, Any]:
        from nspy_mcp import demo_kernels as k  # lazy: loaded only when a demo runs

        if self.kernels == "torch":
            ref, cands, inputs = (
                k.TORCH_REFERENCE,
                [k.TORCH_FUSED, k.TORCH_WRONG_AXIS],
                k.TORCH_INPUTS,
            )
        else:
            ref, cands, inputs = k.REFERENCE, [k.VECTORIZED, k.WRONG_AXIS], k.INPUTS
        request: dict[str, Any] = {
            "reference": ref,
            "candidates": cands,
            "inputs": inputs,
            "workdir": str(k.DIRECTORY),
            "configs": DEMO_CONFIGS,
            "backend": self.backend,
            "runs": DEMO_RUNS,
            "wait_s": WAIT_S,
        }
        if self.kernels == "torch" and self.backend == "ncu":
            # The composed reference launches several kernels per call: add their times.
            request["kernels"] = {"combine": "sum"}
        return request


def choose_plan(env: EnvironmentReport, backend: str) -> Plan:
    """Pick backend and kernels from the environment report and the --backend choice."""
    torch_ok = any(f.name == "torch" and f.installed for f in env.frameworks)
    gpu = env.gpus[0].name if env.gpus else None
    ncu = env.backend("ncu")
    if gpu is None:
        why = f"no GPU visible here ({env.gpu_error or 'none found'})"
        if backend == "ncu":
            raise DemoError(f"--backend ncu needs a GPU, and {why}; use --backend events")
        return Plan("events", "numpy", f"{why}: using the events backend on CPU, numpy kernels")
    if not torch_ok:
        why = f"GPU {gpu} found, but torch is not installed, so the demo's kernels run on CPU"
        if backend == "ncu":
            raise DemoError(f"{why}; install torch for the GPU demo, or use --backend events")
        return Plan("events", "numpy", f"{why}: events backend, numpy kernels")
    if backend == "events" or (backend == "auto" and not ncu.available):
        note = "" if backend == "events" else f" (ncu unusable: {ncu.reason})"
        return Plan("events", "torch", f"GPU {gpu}: CUDA-event timing of torch kernels{note}")
    if not ncu.available:
        raise DemoError(f"--backend ncu cannot work here: {ncu.reason}")
    return Plan("ncu", "torch", f"GPU {gpu}: Nsight Compute on torch kernels")


def _structured(result: CallToolResult, tool: str) -> dict[str, Any]:
    if result.is_error or result.structured_content is None:
        text = " ".join(getattr(c, "text", "") for c in result.content)
        raise DemoError(f"{tool} failed: {text}")
    return dict(result.structured_content)


def _short(spec: str) -> str:
    return spec.rpartition(":")[2]


def _params(p: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in p.items()) or "(no params)"


def summarize(result: ProfileResult, out: Any) -> bool:
    """Write what an agent would read off the result; True if it shows what the demo shows."""
    out(f"   status {result.status}: {result.message}\n")
    passed: dict[str, bool] = {}
    for c in result.correctness:
        passed[c.Annotation] = passed.get(c.Annotation, True) and c.Passed
    for ann, ok in passed.items():
        errs = [c for c in result.correctness if c.Annotation == ann and not c.Passed]
        if ok:
            out(f"   correctness: {_short(ann)} passed on every config\n")
        else:
            worst = max((e.MaxAbsError or 0.0) for e in errs)
            cls = errs[0].ErrorClass or "incorrect"
            out(f"   correctness: {_short(ann)} {cls} (max abs error {worst:.3g}); not timed\n")
    for comp in result.comparisons:
        if comp.Speedup is None:
            continue
        ci = f"[{comp.Speedup_CI95_Lower:.3g}, {comp.Speedup_CI95_Upper:.3g}]"
        res = "resolvable" if comp.Resolvable else "NOT resolvable (within noise)"
        out(
            f"   speedup {_short(comp.Annotation)} vs {_short(comp.Baseline)}, "
            f"{_params(comp.Params)}: {comp.Speedup:.3g}x 95% CI {ci}, {res}\n"
        )
    verdicts = set(passed.values())
    return result.status == "done" and verdicts == {True, False} and bool(result.comparisons)


def plot_hint(result_id: str, store: Path | str) -> str:
    """How to plot the result: the command, and first the extra it needs where it is missing
    (the README's install has no matplotlib, and `plot` then exits 2)."""
    command = f"nspy-mcp plot {result_id} --store {store}"
    if importlib.util.find_spec("matplotlib") is None:
        return f"Plot: pip install 'nspy-mcp[plot]', then {command}"
    return f"Plot: {command}"


async def _demo(store: Path, backend: str, environ: dict[str, str]) -> int:
    out = sys.stdout.write
    out(f"nspy-mcp demo: starting the server over stdio (store {store})\n")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nspy_mcp", "serve", "--store", str(store)],
        # The SDK passes only a minimal environment by default; the demo should see this
        # machine as the user does (NSPY_NCU, CUDA_VISIBLE_DEVICES, library paths).
        env=environ,
    )
    last_phase = [""]

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        phase = (message or "").split(" ", 1)[0]
        if phase and phase != last_phase[0]:
            last_phase[0] = phase
            sys.stderr.write(f"   ... {progress:.0f}% {message}\n")

    async with Client(params) as client:
        try:
            result = await _loop(client, backend, on_progress, out)
        except DemoError as err:  # raised inside the client's task group: report it here
            sys.stderr.write(f"nspy-mcp demo: {err}\n")
            return 1
    ok = summarize(result, out)
    out(
        f"Raw per-run values: read_results(result_id='{result.result_id}', detail='full'). "
        f"{plot_hint(result.result_id, store)}\n"
    )
    if not ok:
        sys.stderr.write("nspy-mcp demo: the result does not show what the demo expects\n")
    return 0 if ok else 1


async def _loop(client: Client, backend: str, on_progress: Any, out: Any) -> ProfileResult:
    out("1. check_environment\n")
    env = EnvironmentReport.model_validate(
        _structured(await client.call_tool("check_environment", {}), "check_environment")
    )
    plan = choose_plan(env, backend)
    out(f"   {plan.why}\n")

    out("2. validate_metrics\n")
    validation = MetricsValidation.model_validate(
        _structured(
            await client.call_tool("validate_metrics", {"metrics": [DEFAULT_METRIC]}),
            "validate_metrics",
        )
    )
    for m in validation.metrics:
        out(f"   {m.name}: {m.status} (chip {validation.chip}, {validation.catalog_source})\n")
    if plan.backend != "ncu":
        out("   (the events backend times whole calls; metrics apply to ncu runs)\n")

    out(f"3. profile_candidates (backend {plan.backend}, {plan.kernels} kernels)\n")
    t0 = time.monotonic()
    answer = _structured(
        await client.call_tool(
            "profile_candidates", {"request": plan.request()}, progress_callback=on_progress
        ),
        "profile_candidates",
    )
    result_id = answer["result_id"]
    out(f"   result {result_id}: {answer['status']} after {time.monotonic() - t0:.1f} s\n")

    out("4. read_results\n")
    read = _structured(
        await client.call_tool(
            "read_results",
            {"result_id": result_id, "wait_s": 600.0},
            progress_callback=on_progress,
        ),
        "read_results",
    )
    return ProfileResult.model_validate(read["result"])


def run_demo(*, store: str | None, backend: str, environ: Mapping[str, str]) -> int:
    """Run the demo; returns the exit status (0 when the loop showed what it should).
    ``environ``: the server's whole environment, the command's own (the CLI reads it)."""
    root = Path(store) if store else Path(tempfile.mkdtemp(prefix="nspy-mcp-demo-"))
    return anyio.run(_demo, root, backend, dict(environ))
