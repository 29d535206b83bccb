"""The result manifest: one builder for the stored ``manifest.json`` and the MCP resource.

The manifest answers "what was asked, when, on what, and where are the files" without
loading the rows. The store writes it next to each result (adding its own lock owner), and
the server's ``nspy://results/{id}/manifest`` resource serves the same dict, so the two can
never disagree on a field.
"""

from __future__ import annotations

from typing import Any

from nsight_core.request import ProfileRequest
from nsight_core.results import ProfileResult

MANIFEST_FORMAT = 1
"""Version of the manifest's layout; raise it when a field changes meaning or is removed."""


def result_manifest(result: ProfileResult, request: ProfileRequest) -> dict[str, Any]:
    """The manifest of ``result`` (made from ``request``) as a JSON-ready dict."""
    return {
        "format": MANIFEST_FORMAT,
        "result_id": result.result_id,
        "status": result.status,
        "created_at": result.created_at,
        "finished_at": result.finished_at,
        "request": request.model_dump(mode="json"),
        "provenance": result.provenance.model_dump(mode="json") if result.provenance else None,
        "artifacts": result.artifacts,
    }
