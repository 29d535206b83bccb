"""Metric catalogs: which ncu metric names exist on a chip, and `validate_metrics` on top.

A catalog holds, per chip and ncu version, every *base* metric (``dram__throughput``) with
its type, unit and description, and the list of full names ncu accepts for it
(``dram__throughput.avg.pct_of_peak_sustained_elapsed``...). Most bases share one of a few
suffix lists, so a catalog stores each distinct suffix list once and every base points at
one; that keeps a chip to roughly a hundred kilobytes compressed instead of megabytes.

Where catalogs come from:

- shipped: ``nsight_core/data/catalogs/<ncu-version>/<chip>.json.gz``, written by
  ``tools/record_catalogs.py`` on a GPU host from real ``ncu --query-metrics`` output;
- live: when the probe reports a usable ncu (found by `nsight_core.host.ncu_install`),
  ``ncu --query-metrics --chips X`` (base names with type/unit/description) plus
  ``--query-metrics-mode all`` (every full name), run by `sandbox.run_command`, parsed
  with the same code the recorder uses, and cached per (ncu version, chip).

Chip names (the GPU -> chip table, ``ncu --list-chips`` parsing) belong to
`nsight_core.host.ncu_install`. This module finds and loads a chip's catalog and answers
`validate_metrics`; the catalog's form (parsing ncu's text, the compact layout, the index)
is `nsight_core.host.catalog_format`, and the check of one name with its nearest valid names
is `nsight_core.host.metric_check`. The names callers import from here are in ``__all__``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.host.catalog_format import (
    COLLECTION_ORDER,
    CatalogIndex,
    QueryRow,
    build_catalog,
    catalog_version_dir,
    dump_catalog,
    load_catalog_bytes,
    parse_query_metrics,
)
from nsight_core.host.metric_check import (
    MetricCheck,
    MetricsValidation,
    check_metric,
    estimate_passes,
    unsummed_note,
)
from nsight_core.host.ncu_install import DEFAULT_CHIP, parse_list_chips, table_chips
from nsight_core.host.probe import cache_dir, probe_environment
from nsight_core.plan.config import EngineConfig
from nsight_core.processes.sandbox import run_command
from nsight_core.request import DEFAULT_METRIC

__all__ = [
    "LIVE_QUERY_TIMEOUT_S",
    "SHIPPED_DIR",
    "CatalogIndex",
    "MetricCheck",
    "MetricsValidation",
    "QueryRow",
    "build_catalog",
    "check_metric",
    "dump_catalog",
    "estimate_passes",
    "known_chips",
    "load_catalog_bytes",
    "load_shipped",
    "parse_query_metrics",
    "query_live_catalog",
    "shipped_catalogs",
    "validate_metrics",
    "warm_metric_check",
]

# --------------------------------------------------------------------------------------
# Loading and indexing
# --------------------------------------------------------------------------------------

SHIPPED_DIR = Path(__file__).parents[1] / "data" / "catalogs"
LIVE_QUERY_TIMEOUT_S = 120.0

_index_cache: dict[tuple[str, str, str], CatalogIndex] = {}


def shipped_catalogs(root: Path | None = None) -> dict[str, list[str]]:
    """ncu version directory -> chips with a shipped catalog."""
    root = SHIPPED_DIR if root is None else root
    out: dict[str, list[str]] = {}
    if root.is_dir():
        for vdir in sorted(root.iterdir()):
            chips = sorted(p.name[: -len(".json.gz")] for p in vdir.glob("*.json.gz"))
            if chips:
                out[vdir.name] = chips
    return out


def _pick_version(versions: Sequence[str], ncu_version: str | None) -> str:
    """The shipped version for this ncu: the same major.minor.patch, else the newest not
    newer than it, else the newest."""

    def key(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", v))

    ordered = sorted(versions, key=key)
    if ncu_version:
        want = key(catalog_version_dir(ncu_version))
        older = [v for v in ordered if key(v) <= want]
        if older:
            return older[-1]
    return ordered[-1]


def load_shipped(chip: str, version_dir: str, root: Path | None = None) -> CatalogIndex:
    root = SHIPPED_DIR if root is None else root
    key = ("shipped", version_dir, chip)
    if key not in _index_cache:
        data = (root / version_dir / f"{chip}.json.gz").read_bytes()
        _index_cache[key] = CatalogIndex.from_dict(load_catalog_bytes(data), "shipped")
    return _index_cache[key]


def query_live_catalog(ncu: str, ncu_version: str, chip: str, config: EngineConfig) -> CatalogIndex:
    """Catalog from a live ``ncu --query-metrics --chips CHIP``, cached per (version, chip)
    in memory and under ``config``'s cache directory. Raises NsightCoreError(PROFILER_ERROR)."""
    vdir = catalog_version_dir(ncu_version)
    key = ("live", vdir, chip)
    if key in _index_cache:
        return _index_cache[key]
    path = cache_dir(config) / "catalogs" / vdir / f"{chip}.json.gz"
    try:
        idx = CatalogIndex.from_dict(load_catalog_bytes(path.read_bytes()), "live")
    except (OSError, ValueError):
        cat = _query_live(ncu, ncu_version, chip)
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(dump_catalog(cat))
        idx = CatalogIndex.from_dict(cat, "live")
    _index_cache[key] = idx
    return idx


def _query_live(ncu: str, ncu_version: str, chip: str) -> dict[str, Any]:
    colls: dict[str, tuple[Sequence[QueryRow], Sequence[QueryRow] | None]] = {}
    for coll in COLLECTION_ORDER:
        texts: list[str | None] = []
        for mode in ("base", "all"):
            argv = [ncu, "--query-metrics", "--chips", chip, "--csv"]
            if coll != "profiling":
                argv += ["--query-metrics-collection", coll]
            if mode == "all":
                argv += ["--query-metrics-mode", "all"]
            r = run_command(argv, LIVE_QUERY_TIMEOUT_S)
            texts.append(r.stdout.text() if r.exit_code == 0 else None)
            if coll == "profiling" and r.exit_code != 0:
                out = (r.stderr.text() or r.stdout.text()).strip() or r.message
                raise NsightCoreError(
                    ErrorClass.PROFILER_ERROR,
                    f"`ncu --query-metrics --chips {chip}` failed: {out[:300]}",
                    "pass a chip from `ncu --list-chips`, or use the shipped catalogs",
                )
        base_text, all_text = texts
        if base_text:
            base_rows = parse_query_metrics(base_text)
            all_rows = parse_query_metrics(all_text) if all_text else None
            if base_rows:
                colls[coll] = (base_rows, all_rows or None)
    if "profiling" not in colls:
        raise NsightCoreError(
            ErrorClass.PROFILER_ERROR,
            f"`ncu --query-metrics --chips {chip}` printed no metric this parser understands",
            "report the ncu version; use the shipped catalogs meanwhile",
        )
    return build_catalog(
        chip=chip, ncu_version=ncu_version, collections=colls, source=f"live ncu {ncu_version}"
    )


def known_chips() -> list[str]:
    """Chips this module can name: shipped catalogs plus the architecture table."""
    chips = set(table_chips())
    for cs in shipped_catalogs().values():
        chips.update(cs)
    return sorted(chips)


def _resolve_chip(
    chip: str | None, notes: list[str], config: EngineConfig
) -> tuple[str, Literal["argument", "gpu", "default"]]:
    if chip:
        return chip.strip().lower(), "argument"
    env = probe_environment(config)
    if env.gpus and (gchip := env.gpus[0].chip):
        g = env.gpus[0]
        notes.append(f"chip {gchip} inferred from GPU 0 ({g.name}, cc {g.compute_capability})")
        return gchip, "gpu"
    if env.gpus:
        notes.append(
            f"no ncu chip known for GPU 0 ({env.gpus[0].name}); assumed {DEFAULT_CHIP}: "
            "pass chip= to choose"
        )
    else:
        notes.append(
            f"no GPU visible: checked against {DEFAULT_CHIP} (H100/H200); pass chip= "
            "for another GPU"
        )
    return DEFAULT_CHIP, "default"


def _used_ncu(config: EngineConfig) -> tuple[str, str] | None:
    env = probe_environment(config)
    used = next((n for n in env.ncu if n.used), None)
    if used and used.version and used.launch_mode_ok:
        return used.path, used.version
    return None


def _select_catalog(
    chip: str, source: Literal["auto", "shipped", "live"], notes: list[str], config: EngineConfig
) -> CatalogIndex | None:
    shipped = shipped_catalogs()
    ncu = _used_ncu(config) if source != "shipped" else None
    if ncu is not None:
        vdir = catalog_version_dir(ncu[1])
        if source == "auto" and chip in shipped.get(vdir, []):
            return load_shipped(chip, vdir)
        try:
            return query_live_catalog(ncu[0], ncu[1], chip, config)
        except NsightCoreError as exc:
            if source == "live":
                raise
            notes.append(f"live query failed ({exc.message}); using the shipped catalogs")
    elif source == "live":
        raise NsightCoreError(
            ErrorClass.PROFILER_ERROR,
            "live catalog asked for, but no usable ncu (2022.4+) is on PATH or in NSPY_NCU",
            "use source='auto'",
        )
    versions = [v for v, cs in shipped.items() if chip in cs]
    if not versions:
        notes.append(
            f"no catalog for {chip}: none shipped"
            + (
                f" (shipped chips: {', '.join(sorted({c for cs in shipped.values() for c in cs}))})"
                if shipped
                else " yet"
            )
            + ", and no ncu here to ask; names are unverified"
        )
        return None
    v = _pick_version(versions, ncu[1] if ncu else None)
    if ncu is not None and catalog_version_dir(ncu[1]) != v:
        notes.append(f"catalog recorded with ncu {v}, this host has ncu {ncu[1]}")
    return load_shipped(chip, v)


def warm_metric_check(config: EngineConfig) -> None:
    """Read, once per process, what a first metric check needs: the environment probe (GPU,
    ncu's version, cupti) and this chip's catalog. A server calls it in a thread at its very
    start, so a first request finds them read or waits only for the rest of that one read.
    Failures are the request's own to report, so none is raised here."""
    with contextlib.suppress(Exception):
        validate_metrics([DEFAULT_METRIC], config=config)


def validate_metrics(
    names: Sequence[str],
    chip: str | None = None,
    *,
    source: Literal["auto", "shipped", "live"] = "auto",
    config: EngineConfig,
) -> MetricsValidation:
    """Check ncu metric names for a chip, offline from shipped catalogs or live from ncu.

    ``chip`` defaults to GPU 0's chip, else gh100 (with a note). An unknown chip raises
    NsightCoreError(INVALID_REQUEST) listing the known ones. ``source``: ``auto`` prefers a
    shipped catalog of this host's ncu version, then a live (cached) query, then the nearest
    shipped version; ``shipped`` never runs ncu; ``live`` always asks ncu. ``config`` names
    the ncu and the cache directory: those of the server whose jobs the names are for.
    """
    notes: list[str] = []
    chip_name, chip_source = _resolve_chip(chip, notes, config)
    known = known_chips()
    if chip_name not in known and not (
        source != "shipped"
        and (ncu := _used_ncu(config)) is not None
        and chip_name in _live_chips(ncu[0])
    ):
        raise NsightCoreError(
            ErrorClass.INVALID_REQUEST,
            f"unknown chip {chip_name!r}",
            f"use one of: {', '.join(known)} (H100/H200 are gh100, A100 ga100)",
        )
    idx = _select_catalog(chip_name, source, notes, config)
    if idx is None:
        checks = [
            MetricCheck(name=n, status="unverified", message="no catalog for this chip")
            for n in names
        ]
    else:
        checks = [check_metric(idx, n) for n in names]
        if source == "auto" and idx.source == "shipped" and _used_ncu(config) is None:
            notes.append(
                f"offline check against the shipped {idx.chip} catalog of ncu {idx.ncu_version}"
            )
    note = unsummed_note([c.name for c in checks if c.status == "valid"])
    return MetricsValidation(
        chip=chip_name,
        chip_source=chip_source,
        catalog_source=idx.source if idx else "none",
        catalog_ncu_version=idx.ncu_version if idx else None,
        metrics=checks,
        all_valid=bool(checks) and all(c.status == "valid" for c in checks),
        estimated_passes=estimate_passes(checks, idx),
        notes=[*notes, note] if note else notes,
    )


_live_chip_cache: dict[str, list[str]] = {}


def _live_chips(ncu: str) -> list[str]:
    if ncu not in _live_chip_cache:
        r = run_command([ncu, "--list-chips"], 30.0)
        _live_chip_cache[ncu] = parse_list_chips(r.stdout.text()) if r.exit_code == 0 else []
    return _live_chip_cache[ncu]
