"""What the tools run in: the lifespan's state, the context helpers, and `ToolServer`.

`ToolServer` is the MCPServer nspy-mcp runs on. Its tool errors all read as nspy-mcp's
(class first, field, fix): the SDK prefixes each with "Error executing tool <name>: " and
passes pydantic's raw dump through for schema errors, and both become `agent_text`. Its
`tools/list` carries the compact schemas `nspy_mcp.schemas` builds, each tool's output
narrowed by the `OutputPolicy` it was added with. The tools themselves are in `tools.py`,
the server built from them in `server.py`; the tasks extension (`tasks.py`) reads the same
state.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult, InputRequiredResult, ToolAnnotations
from mcp.types import Tool as MCPTool

from nsight_core.plan.config import EngineConfig
from nsight_core.store.result_store import ResultStore
from nspy_mcp.jobs import JobQueue, ProgressSink
from nspy_mcp.progress import ProgressUpdate
from nspy_mcp.schemas import OutputPolicy, advertised_input, advertised_output
from nspy_mcp.tool_errors import agent_text

log = logging.getLogger(__name__)


@dataclass
class AppState:
    """What the lifespan yields: the store, this connection's job queue and the engine's
    settings (read once when the server was built)."""

    store: ResultStore
    jobs: JobQueue
    config: EngineConfig


def state_of(ctx: Context[AppState, Any]) -> AppState:
    """The lifespan's state, as a tool sees it."""
    return ctx.request_context.lifespan_context


def progress_sink(ctx: Context[AppState, Any]) -> ProgressSink:
    """Relay a job's progress to the calling client (a no-op unless it sent a token)."""

    async def report(update: ProgressUpdate) -> None:
        message = update.message
        if update.eta_s is not None and update.progress < update.total:
            message = f"{message}, {update.eta_text()}"
        await ctx.report_progress(update.progress, update.total, message)

    return report


class ToolServer(MCPServer[AppState]):
    """MCPServer with nspy-mcp's tool errors and compact tool list (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.output_policies: dict[str, OutputPolicy] = {}

    def register_tool(
        self,
        fn: Callable[..., Any],
        title: str,
        annotations: ToolAnnotations,
        output: OutputPolicy | None = None,
    ) -> None:
        """Add `fn` as a tool described by its docstring, its answer advertised by `output`."""
        # Dedented: the docstring's indentation would otherwise reach the agent as-is.
        description = inspect.cleandoc(fn.__doc__ or "")
        self.tool(title=title, description=description, annotations=annotations)(fn)
        if output is not None:
            self.output_policies[fn.__name__] = output

    async def list_tools(self) -> list[MCPTool]:
        """The tools with the compact schemas `nspy_mcp.schemas` builds (see there why)."""
        return [
            tool.model_copy(
                update={
                    "input_schema": advertised_input(tool.input_schema),
                    "output_schema": None
                    if tool.output_schema is None
                    else advertised_output(
                        tool.output_schema, self.output_policies.get(tool.name, OutputPolicy())
                    ),
                }
            )
            for tool in await super().list_tools()
        ]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[AppState, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc, UnexpectedToolError):
                log.error("tool %r raised an unexpected exception", name, exc_info=exc.__cause__)
            tool = self._tool_manager.get_tool(name)
            schema = tool.parameters if tool is not None else None
            names = [t.name for t in self._tool_manager.list_tools()]
            raise ToolError(agent_text(name, exc, schema, names)) from exc
