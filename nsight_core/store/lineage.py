"""A lineage: what makes two results' speedups comparable, so one can be the best so far.

Two jobs' speedups may be set side by side only if each measured its candidates against
the same reference doing the same work on the same device: the reference where it lives
and the sha256 of its source (editing the reference starts a new lineage), the input maker
likewise, the configs (as a set), the backend of the final rows and its time metric, what
the backend's own settings change (cache and clock control, the kernels spec), and the GPU
(its UUID; a device without one, a CPU, by name and host): speeds on two GPUs are not one
scale. Runs, warm-up and wait times change how sure a job is, not what it measures, so
they are left out.

Sources are hashed when the job is queued (`sources_of`), so an agent editing a file while
its job waits or runs does not relabel what ran. A callable named by module
('package.module:name') has no file the server may import to find, so its source is keyed
by name only: name the reference by file for its edits to start a new lineage.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nsight_core.collectors import get_backend
from nsight_core.request import ProfileRequest, module_of, parse_callable_spec, request_workdir
from nsight_core.results import ProfileResult, StageName

LINEAGE_ID_HEX = 16
"""Hex digits of a lineage id: a file name in the store, unique among any store's lineages."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def source_sha256(
    request: ProfileRequest, spec: str, workdir: Path, *, trusted: bool
) -> str | None:
    """The sha256 of the source ``spec`` lives in: its file, or the inline source its bare
    name refers to (``trusted``: the reference's or the input maker's); None for a module
    or a file that cannot be read."""
    file, module, _ = parse_callable_spec(spec)
    if file is not None:
        try:
            return _sha256((workdir / file).resolve().read_bytes())
        except OSError:
            return None
    if module is not None:
        return None
    text = request.reference_source if trusted and request.reference_source else request.source
    return None if text is None else _sha256(text.encode())


@dataclass(frozen=True)
class Sources:
    """The request's callables as they were when it was queued."""

    trusted: dict[str, Any]
    """The reference and the input maker: where each lives, its name and its source's hash."""
    candidates: dict[str, str | None]
    """Each candidate's source hash, by its spec."""


def sources_of(request: ProfileRequest) -> Sources:
    """Hash the request's sources now (when the job is queued)."""
    workdir = request_workdir(request)

    def trusted(spec: str) -> dict[str, Any]:
        return {
            "where": module_of(request, spec, workdir, trusted=True),
            "name": parse_callable_spec(spec)[2],
            "sha256": source_sha256(request, spec, workdir, trusted=True),
        }

    return Sources(
        trusted={"reference": trusted(request.reference), "inputs": trusted(request.inputs)},
        candidates={
            c: source_sha256(request, c, workdir, trusted=False) for c in request.candidates
        },
    )


@dataclass(frozen=True)
class Lineage:
    """The id of a lineage, the parts it was made of, and what it ranks on."""

    id: str
    parts: dict[str, Any]
    metric: str
    """The time metric: candidates are compared on its speedups."""
    stage: StageName | None
    """The stage whose rows are the job's report ('profile' when staged, else None)."""


def lineage_of(request: ProfileRequest, result: ProfileResult, sources: Sources) -> Lineage:
    """The lineage of a finished job: see the module docstring for its parts."""
    stage: StageName | None = "profile" if request.stages is not None else None
    backends = sorted({r.Backend for r in result.rows if r.Stage == stage})
    backend = get_backend(backends[0] if len(backends) == 1 else request.backend)
    prov = result.provenance
    device = (prov.gpu_uuid if prov else None) or (
        f"{prov.gpu if prov else None}@{prov.host if prov else None}"
    )
    parts: dict[str, Any] = {
        **sources.trusted,
        "configs": sorted(json.dumps(c, sort_keys=True) for c in request.configs),
        "backend": backend.name,
        "metric": backend.default_metric,
        "kernels": request.kernels.model_dump(mode="json", exclude_defaults=True),
        "device": device,
    }
    if backend.settings_apply:
        parts["cache_control"] = request.cache_control
        parts["clock_control"] = request.clock_control
    digest = _sha256(json.dumps(parts, sort_keys=True).encode())[:LINEAGE_ID_HEX]
    return Lineage(id=digest, parts=parts, metric=backend.default_metric, stage=stage)
