"""Stored results as MCP resources: the listing, a whole result, its parts, its manifest,
its rows as CSV and the files its job left (ncu report, logs, raw events).

Resources give a client (or a person in an MCP inspector) the full stored data, raw per-run
values included, where the tools answer compactly; answers link here (`links.py`). A bad or
unknown id, or a file the job did not leave, is a protocol-level error
(`ResourceNotFoundError`), not a tool error.
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
from nspy_mcp.links import MAX_FILE_BYTES, RESULT_FILES, ResultFile, result_file
from nspy_mcp.report_cmd import rows_csv

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

    @server.resource(
        "nspy://results/{result_id}/rows.csv",
        name="result-rows-csv",
        description="A result's rows as CSV, one column per row field, raw per-run values included.",
        mime_type="text/csv",
    )
    def rows_csv_resource(result_id: str) -> str:
        return rows_csv(load(result_id).rows)

    for file in RESULT_FILES:
        server.resource(
            f"nspy://results/{{result_id}}/files/{file.name}",
            name=f"result-file-{file.key}",
            description=file.description,
            mime_type=file.mime_type,
        )(_file_reader(store, load, file))


def _file_reader(
    store: ResultStore, load: Callable[[str], ProfileResult], file: ResultFile
) -> Callable[[str], str | bytes]:
    """The resource function of one job file: bytes for a binary file, text otherwise."""

    def read_file(result_id: str) -> str | bytes:
        load(result_id)  # the id's own errors first
        path = result_file(store, result_id, file)
        if path is None:
            raise ResourceNotFoundError(
                f"invalid_request: result {result_id} has no {file.name} (its job left none)"
            )
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ResourceError(
                f"{file.name} of {result_id} is {size} bytes, more than the "
                f"{MAX_FILE_BYTES} served as a resource; read it at {path}"
            )
        data = path.read_bytes()
        return data if file.binary else data.decode("utf-8", errors="replace")

    read_file.__name__ = f"result_file_{file.key}"
    return read_file
