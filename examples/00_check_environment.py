"""00: what can profiling do on this machine? (no MCP, no GPU needed)

`probe_environment` is what the `check_environment` tool returns: GPUs, every ncu, counter
permission, which backends work here and why not, and what to do about each problem. It
only looks; it never changes a driver setting. The `events` backend works everywhere.
"""

from __future__ import annotations

from nsight_core.host.probe import EnvironmentReport, probe_environment
from nsight_core.plan.config import EngineConfig


def main() -> EnvironmentReport:
    report = probe_environment(EngineConfig.from_env())  # this script is the engine's edge
    gpus = ", ".join(g.name for g in report.gpus) or f"none ({report.gpu_error or 'not found'})"
    print(f"GPUs: {gpus}")
    print(f"ncu: {report.ncu_used or 'not found'}")
    for backend in report.backends:
        print(f"backend {backend.name}: {'yes' if backend.available else 'no'} ({backend.reason})")
    for step in report.remediation:
        print(f"to do: {step}")
    assert report.backend("events").available, "the events backend works on any machine"
    return report


if __name__ == "__main__":
    main()
