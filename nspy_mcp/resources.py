"""Stored results as MCP resources: the listing, a whole result, its parts and its manifest.

Resources give a client (or a person in an MCP inspector) the full stored JSON, raw per-run
values included, where the read_results tool answers compactly. A bad or unknown id is a
protocol-level error (`ResourceNotFoundError`), not a tool error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError

from nsight_core.errors import NsightCoreError
from nsight_core.results import ProfileResult
from nsight_core.store.manifest import result_manifest
from nsight_core.store.result_store import CorruptResultError, ResultStore, validate_result_id

RESULT_PARTS: dict[str, str] = {
    "rows": "Rows with statistics, trust verdicts and raw per-run values.",
    "comparisons": "Candidate vs reference comparisons (Speedup, CI, Resolvable).",
    "correctness": "Correctness verdicts per candidate and config.",
    "failures": "Failures of callables, runs or the whole job.",
}
"""The list fields of a result served on their own, with the description a client lists."""


def register_resources(server: MCPServer[Any], store: ResultStore) -> None:
    """Add the ``nspy://results...`` resources over ``store`` to ``server``."""

    def load(result_id: str) -> ProfileResult:
        try:
            return store.load(validate_result_id(result_id))
        except NsightCoreError as err:
            raise ResourceNotFoundError(f"{err.error_class.value}: {err}") from err
        except CorruptResultError as err:
            raise ResourceError(str(err)) from err

    @server.resource(
        "nspy://results",
        name="results",
        description="The 50 most recent results (summaries), newest first.",
        mime_type="application/json",
    )
    def recent_results() -> str:
        page = store.query(limit=50)
        return "[" + ",".join(s.model_dump_json() for s in page.summaries) + "]"

    @server.resource(
        "nspy://results/{result_id}",
        name="result",
        description="A whole stored result (ProfileResult JSON, raw per-run values included).",
        mime_type="application/json",
    )
    def result_resource(result_id: str) -> str:
        return load(result_id).model_dump_json()

    def part_reader(part: str) -> Callable[[str], str]:
        def read_part(result_id: str) -> str:
            items = getattr(load(result_id), part)
            return "[" + ",".join(item.model_dump_json() for item in items) + "]"

        read_part.__name__ = f"result_{part}"
        return read_part

    for part, description in RESULT_PARTS.items():
        server.resource(
            f"nspy://results/{{result_id}}/{part}",
            name=f"result-{part}",
            description=description,
            mime_type="application/json",
        )(part_reader(part))

    @server.resource(
        "nspy://results/{result_id}/manifest",
        name="result-manifest",
        description="The request, status, times, provenance and artifact paths of a result.",
        mime_type="application/json",
    )
    def manifest_resource(result_id: str) -> str:
        result = load(result_id)
        return json.dumps(result_manifest(result, store.load_request(result.result_id)))
