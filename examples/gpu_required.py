"""What the GPU examples need, checked before they import torch: a plain message, not a traceback.

Each GPU example calls `exit_unless_gpu(__name__, ...)` before its first torch import. Run as
a script on a host that lacks a piece (a CUDA GPU, a usable ncu, torch, triton), it writes on
stderr what is missing and which example runs here instead, and exits with `EXIT_CODE`.
Imported under any other name (by the tests, or by the worker process that runs a `@kernel`
body) it does nothing, so the examples stay importable everywhere.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from nsight_core.host.probe import probe_environment
from nsight_core.plan.config import EngineConfig

EXIT_CODE = 2
EVENTS_ENGINE = "examples/01_profile_softmax_events.py (the same engine call on the CPU)"
EVENTS_KERNEL = "examples/10_kernel_events_cpu.py (the same @kernel API on the CPU)"


def missing(*, triton: bool = False) -> list[str]:
    """What this host lacks for an ncu GPU example; empty when it can run one."""
    gaps: list[str] = []
    env = probe_environment(EngineConfig.from_env())
    if not env.gpus:
        gaps.append("no NVIDIA GPU visible" + (f" ({env.gpu_error})" if env.gpu_error else ""))
    ncu = next(b for b in env.backends if b.name == "ncu")
    if not ncu.available:
        gaps.append(f"backend 'ncu' unavailable: {ncu.reason}")
    for package in ("torch", "triton") if triton else ("torch",):
        if importlib.util.find_spec(package) is None:
            gaps.append(f"{package} is not installed")
    if not gaps:  # only now pay for importing torch
        import torch

        if not torch.cuda.is_available():
            gaps.append(f"torch {torch.__version__} sees no CUDA GPU")
    return gaps


def exit_unless_gpu(module_name: str, *, instead: str, triton: bool = False) -> None:
    """As a script (`module_name == "__main__"`), exit with a plain message if a piece is missing."""
    if module_name != "__main__":
        return
    gaps = missing(triton=triton)
    if not gaps:
        return
    main = sys.modules["__main__"]
    name = Path(getattr(main, "__file__", None) or "this example").name
    needs = "a CUDA GPU, Nsight Compute (ncu), torch" + (", triton" if triton else "")
    sys.stderr.write(
        f"{name} needs {needs}; this host lacks:\n"
        + "".join(f"  - {gap}\n" for gap in gaps)
        + f"Without a GPU, run {instead}: it uses the events backend.\n"
        "`nspy-mcp env` says which backends work here.\n"
    )
    raise SystemExit(EXIT_CODE)
