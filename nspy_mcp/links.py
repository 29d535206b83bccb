"""Where a result's full data is: the store's resources for it, and the links answers carry.

A tool answer stays small (`answers.fit_result`); what it leaves out stays one read away.
Each finished result is served as resources (`resources.py` registers them): the whole
stored result, its rows as CSV, its manifest, and the files its job left (ncu report, logs,
raw events). `result_links` names those that exist as `resource_link` content blocks, so a
client can fetch them without knowing the URI scheme, and `full_data_text` says the same in
words for clients that read only the text (or only the structured answer).

A file is served only from the result's own directory, only as a regular file (never a
symlink a job might have left), and only up to `MAX_FILE_BYTES`; its path stays in the
result's `artifacts` for larger ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mcp.types import ResourceLink

from nsight_core.protocol import JOB_ARTIFACTS
from nsight_core.results import ProfileResult
from nsight_core.store.result_store import TERMINAL, ResultStore

RESULTS_URI = "nspy://results"
MAX_FILE_BYTES = 64 * 1024 * 1024
"""Largest job file served as a resource (an ncu report with many sections can be larger;
its path is in the result's `artifacts`)."""


@dataclass(frozen=True)
class ResultFile:
    """A file a job may leave, as a resource: `JOB_ARTIFACTS` key, URI name, type, text."""

    key: str
    name: str
    mime_type: str
    description: str

    @property
    def binary(self) -> bool:
        return not self.mime_type.startswith("text/") and self.mime_type != "application/jsonl"


RESULT_FILES: tuple[ResultFile, ...] = (
    ResultFile("report", "report.ncu-rep", "application/octet-stream", "The ncu report."),
    ResultFile("ncu_log", "ncu.log", "text/plain", "ncu's log."),
    ResultFile("stderr", "stderr.txt", "text/plain", "The contestant process's stderr."),
    ResultFile("stdout", "stdout.txt", "text/plain", "The contestant process's stdout."),
    ResultFile("judge_stderr", "judge-stderr.txt", "text/plain", "The judge process's stderr."),
    ResultFile("events", "events.jsonl", "application/jsonl", "Raw per-run events of the job."),
)
"""Every `JOB_ARTIFACTS` file, served at nspy://results/{result_id}/files/{name}."""


def result_uri(result_id: str, part: str = "") -> str:
    """The resource URI of a result, or of one of its parts (`rows.csv`, `files/ncu.log`)."""
    return f"{RESULTS_URI}/{result_id}" + (f"/{part}" if part else "")


def result_file(store: ResultStore, result_id: str, file: ResultFile) -> Path | None:
    """The job's file in the result's directory, if it is there as a regular file."""
    rdir = store.result_dir(result_id)
    path = rdir / JOB_ARTIFACTS[file.key]
    if path.is_symlink() or not path.is_file():
        return None
    if not path.resolve().is_relative_to(rdir.resolve()):  # a linked folder on the way
        return None
    return path


def result_links(store: ResultStore, result: ProfileResult) -> list[ResourceLink]:
    """Links to where this result's full data is; a running job's only to its state."""
    rid = result.result_id
    links = [
        ResourceLink(
            uri=result_uri(rid),
            name="result",
            title=f"result {rid}",
            description="The whole stored result: every row with raw per-run values, "
            "whole tracebacks.",
            mime_type="application/json",
        )
    ]
    if result.status not in TERMINAL:
        return links
    if result.rows:
        links.append(
            ResourceLink(
                uri=result_uri(rid, "rows.csv"),
                name="rows.csv",
                description=f"All {len(result.rows)} rows as CSV, raw per-run values included.",
                mime_type="text/csv",
            )
        )
    for file in RESULT_FILES:
        path = result_file(store, rid, file)
        size = path.stat().st_size if path is not None else 0
        if path is None or size == 0 or size > MAX_FILE_BYTES:
            continue
        links.append(
            ResourceLink(
                uri=result_uri(rid, f"files/{file.name}"),
                name=file.name,
                description=file.description,
                mime_type=file.mime_type,
                size=size,
            )
        )
    return links


def full_data_text(result_id: str, *, rows: bool) -> str:
    """One sentence: where the whole result is, for answers that show part of it."""
    csv = f", all rows as CSV: {result_uri(result_id, 'rows.csv')}" if rows else ""
    return (
        f"Everything (raw values, job files): resource {result_uri(result_id)}{csv}; "
        "ncu report and logs: the answer's resource links, paths in `artifacts`."
    )
