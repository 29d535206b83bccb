"""Whether this user may read GPU performance counters: the driver's setting, and one real test.

The probe only looks: it reads ``RmProfilingAdminOnly`` where the driver shows it and, when
asked for a deep probe, profiles one kernel under ncu in a child process; nothing here
changes a driver setting.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import tempfile
from pathlib import Path

from nsight_core.processes.sandbox import run_command

DEEP_TEST_TIMEOUT_S = 180.0
"""A one-kernel ncu run of a torch script: ~4 s of torch import plus ncu start-up, with room."""

_PARAMS_FILE = Path("/proc/driver/nvidia/params")

COUNTERS_URL = "https://developer.nvidia.com/ERR_NVGPUCTRPERM"
"""NVIDIA's page on counter permissions: where a user denied counters is sent."""
COUNTERS_DENIED = "GPU performance counters are restricted to administrators on this host"
COUNTERS_FIX = (
    "Ask the host's administrators to allow GPU performance counters for your user (a driver "
    f"setting that needs root; NVIDIA explains it at {COUNTERS_URL}); meanwhile time kernels "
    "with backend 'cupti' or 'events', which need no counters"
)
"""The cheapest fix for denied counters, in the same words wherever they are denied:
`check_environment`'s remediation, ncu's refusal at run time, and the rows a request naming
ncu gets where another backend answers it (request_defaults). It names who can lift the
restriction and where NVIDIA documents how, never a command: the setting is the host's, and
a shared or rented GPU's tenants must not change it (nor may an agent try)."""


def read_profiling_admin_only(params: Path = _PARAMS_FILE) -> int | None:
    """RmProfilingAdminOnly from the driver's params file; None when unreadable."""
    try:
        text = params.read_text()
    except OSError:
        return None
    m = re.search(r"RmProfilingAdminOnly:\s*(\d+)", text)
    return int(m.group(1)) if m else None


_DEEP_SCRIPTS = {
    "torch": "import torch\nx = torch.ones(4096, device='cuda')\nprint(float((x * 2).sum()))\n",
    "cupy": "import cupy\nx = cupy.ones(4096)\nprint(float((x * 2).sum()))\n",
}


def deep_counter_test(ncu: str | None, have_gpu: bool) -> tuple[str, str]:
    """(outcome, detail) of profiling one kernel in a child process under ncu."""
    if ncu is None:
        return "skipped", "no ncu found"
    if not have_gpu:
        return "skipped", "no GPU visible"
    fw = next((f for f in ("torch", "cupy") if importlib.util.find_spec(f) is not None), None)
    if fw is None:
        return "skipped", "needs torch or cupy to launch a kernel (triton needs torch too)"
    with tempfile.TemporaryDirectory(prefix="nspy-probe-") as tmp:
        script = Path(tmp) / "one_kernel.py"
        script.write_text(_DEEP_SCRIPTS[fw])
        argv = [
            ncu,
            "--metrics",
            "gpu__time_duration.sum",
            "-c",
            "1",
            "--csv",
            "--target-processes",
            "all",
            sys.executable,
            str(script),
        ]
        r = run_command(argv, DEEP_TEST_TIMEOUT_S)
    text = r.stdout.text() + r.stderr.text()
    if "ERR_NVGPUCTRPERM" in text:
        return "permission_denied", f"ncu reported ERR_NVGPUCTRPERM profiling a {fw} kernel"
    if r.exit_code == 0 and "gpu__time_duration" in text:
        return "passed", f"ncu profiled one {fw} kernel"
    tail = " | ".join(ln for ln in text.strip().splitlines()[-3:])
    why = f"exit {r.exit_code}" if r.exit_code is not None else r.message.split("\n", 1)[0]
    return "failed", why + (f": {tail[:300]}" if tail else "")
