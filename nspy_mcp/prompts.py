"""The server's prompt: the optimize-kernel skill's instructions, for hosts without skills.

The text is the skill's `SKILL.md` body (`skills.py`), so the prompt and the skill never
drift apart; its links point at the skill's `skill://` resources.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

from nspy_mcp.skills import bundled_skill

PROMPT_SKILL = "optimize-kernel"
"""The skill whose instructions the prompt carries."""


def register_prompt(server: MCPServer[Any]) -> None:
    """Add the ``optimize_kernel`` prompt to ``server``."""
    instructions = bundled_skill(PROMPT_SKILL).instructions()

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
        return f"Goal: {goal}. Reference: {reference}; inputs: {inputs}.\n\n{instructions}"
