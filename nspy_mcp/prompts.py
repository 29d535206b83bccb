"""The server's prompt: the check -> validate -> profile -> read -> iterate loop for one kernel."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer


def register_prompt(server: MCPServer[Any]) -> None:
    """Add the ``optimize_kernel`` prompt to ``server``."""

    @server.prompt(
        name="optimize_kernel",
        title="Optimize a kernel with nspy-mcp",
        description="The check -> validate -> profile -> read -> iterate loop, for one kernel.",
    )
    def optimize_kernel(
        reference: str = "ref.py:kernel",
        inputs: str = "ref.py:make_inputs",
        goal: str = "a faster candidate that stays correct",
    ) -> str:
        return (
            f"Goal: {goal}. Reference: {reference}; inputs: {inputs}.\n"
            "1. Call check_environment once; pick a backend it says works here "
            "('ncu' for counters, 'events' for time only) and act on its remediation text.\n"
            "2. If you want metrics beyond the default, call validate_metrics and fix every "
            "name it does not call valid.\n"
            "3. Write one or more candidates in files, then call profile_candidates with "
            f"reference={reference!r}, inputs={inputs!r}, your candidates, a few "
            "representative configs, runs >= 3 and an absolute workdir.\n"
            "4. If the answer says 'running', call read_results with its result_id "
            "(wait_s waits). Read correctness first: a candidate that failed is not timed; "
            "fix it. Then read comparisons: act on Resolvable speedups (their 95 % interval "
            "excludes 1.0); an unresolvable one is within noise. A 'noisy' row is usable but "
            "widens the interval, so fewer speedups resolve: add runs to tighten it. Do not "
            "act on 'suspicious' or 'failed' rows (read their Reasons); a null value comes "
            "with ErrorClass and Error. read_results(result_id, cancel=true) stops a job.\n"
            "5. Change one thing, profile again, compare with read_results; stop when the "
            "speedup is resolvable. Never change GPU clocks, power or driver settings."
        )
