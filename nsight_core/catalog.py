"""Metric catalogs: which ncu metric names exist on a chip, and `validate_metrics` on top.

A catalog holds, per chip and ncu version, every *base* metric (``dram__throughput``) with
its type, unit and description, and the list of full names ncu accepts for it
(``dram__throughput.avg.pct_of_peak_sustained_elapsed``...). Most bases share one of a few
suffix lists, so a catalog stores each distinct suffix list once and every base points at
one; that keeps a chip to roughly a hundred kilobytes compressed instead of megabytes.

Where catalogs come from:

- shipped: ``nsight_core/data/catalogs/<ncu-version>/<chip>.json.gz``, written by
  ``tools/record_catalogs.py`` on a GPU host from real ``ncu --query-metrics`` output;
- live: when an ``ncu`` is on PATH, ``ncu --query-metrics --chips X`` (base names with
  type/unit/description) plus ``--query-metrics-mode all`` (every full name), parsed here
  with the same code the recorder uses, and cached per (ncu version, chip).

The parser is tolerant: it reads ncu's ``--csv`` form (columns found by header, not by
position) and the aligned text table (column widths from the dashed rule under the header),
and skips ``==PROF==``/``==WARNING==`` lines, device headers and blank lines.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

CATALOG_FORMAT = 1
"""Version of the JSON layout below; bump it when the layout changes."""

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_CHIP_RE = re.compile(r"^[a-z]{2}\d{2,3}[a-z0-9]{0,3}$")
_NCU_VERSION_RE = re.compile(r"Version\s+(\d+)\.(\d+)\.(\d+)(?:\.(\d+))?")


class QueryRow(NamedTuple):
    """One row of ``ncu --query-metrics`` output; empty strings where ncu printed none."""

    name: str
    type: str
    unit: str
    description: str


# --------------------------------------------------------------------------------------
# Parsing ncu's text
# --------------------------------------------------------------------------------------


def parse_ncu_version(text: str) -> str | None:
    """``ncu --version`` text -> ``"2025.3.1.0"`` (None when no version is printed)."""
    m = _NCU_VERSION_RE.search(text)
    if not m:
        return None
    return ".".join(p for p in m.groups() if p is not None)


def catalog_version_dir(ncu_version: str) -> str:
    """Directory name for a catalog recorded by ncu ``ncu_version``: major.minor.patch."""
    return ".".join(ncu_version.split(".")[:3])


def parse_list_chips(text: str) -> list[str]:
    """``ncu --list-chips`` text -> sorted chip names (``ga100``, ``gh100``...).

    ncu prints the names separated by commas and/or whitespace, possibly after a header
    line; anything that does not look like a chip name is ignored.
    """
    chips = {tok.lower() for tok in re.split(r"[\s,;]+", text) if _CHIP_RE.match(tok.lower())}
    return sorted(chips)


def _is_noise(line: str) -> bool:
    s = line.strip()
    return not s or s.startswith("==") or set(s) <= {"-", " "}


_FIELDS = ("type", "unit", "description")


def _csv_rows(lines: list[str]) -> list[QueryRow]:
    rows: list[QueryRow] = []
    cols = {"name": 0, "type": 1, "unit": 2, "description": 3}
    for cells in csv.reader(lines):
        if not cells or not cells[0].strip():
            continue
        first = cells[0].strip()
        if first.lower() == "metric name":
            header = [c.strip().lower() for c in cells]
            cols = {"name": 0}
            for key in _FIELDS:
                cols[key] = next(
                    (i for i, h in enumerate(header) if h == f"metric {key}"), len(header) + 9
                )
            continue
        if not _NAME_RE.match(first):
            continue

        got = [cells[cols[k]].strip() if cols[k] < len(cells) else "" for k in _FIELDS]
        rows.append(QueryRow(first, got[0], got[1], got[2]))
    return rows


def _text_rows(lines: list[str]) -> list[QueryRow]:
    rows: list[QueryRow] = []
    spans: list[tuple[int, int]] | None = None
    header_seen = False
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.lower().startswith("metric name"):
            header_seen = True
            spans = None
            rule = lines[i + 1] if i + 1 < len(lines) else ""
            if set(rule.strip()) <= {"-", " "} and "-" in rule:
                spans = [(m.start(), m.end()) for m in re.finditer(r"-+", rule)]
            continue
        if _is_noise(line) or stripped.lower().startswith("device "):
            continue
        if spans and len(spans) >= 2:
            parts = [
                line[a : (spans[k + 1][0] if k + 1 < len(spans) else None)].strip()
                for k, (a, _) in enumerate(spans)
            ]
        else:
            parts = re.split(r"\s{2,}", stripped)
            if len(parts) == 1:
                parts = stripped.split(None, 1)
        name = parts[0].split()[0] if parts and parts[0] else ""
        if not _NAME_RE.match(name) or (not header_seen and len(parts) > 1 and " " in name):
            continue
        if len(parts) == 2 and not spans:
            # "name  description" (older ncu printed only these two columns).
            rows.append(QueryRow(name, "", "", parts[1]))
            continue
        parts += [""] * (4 - len(parts))
        rows.append(QueryRow(name, parts[1], parts[2], " ".join(parts[3:]).strip()))
    return rows


def parse_query_metrics(text: str) -> list[QueryRow]:
    """Rows of ``ncu --query-metrics`` output, in either its ``--csv`` or its text form.

    Duplicate names (one table per queried chip or device) keep their first row.
    """
    lines = text.splitlines()
    meaningful = [ln for ln in lines if not _is_noise(ln)]
    is_csv = any(ln.lstrip().startswith('"') for ln in meaningful[:5])
    rows = _csv_rows(meaningful) if is_csv else _text_rows(lines)
    seen: set[str] = set()
    out: list[QueryRow] = []
    for r in rows:
        if r.name not in seen:
            seen.add(r.name)
            out.append(r)
    return out


# --------------------------------------------------------------------------------------
# Building the compact catalog
# --------------------------------------------------------------------------------------


def _find_base(full: str, bases: Mapping[str, Any]) -> str | None:
    cand = full
    while True:
        if cand in bases:
            return cand
        if "." not in cand:
            return None
        cand = cand.rsplit(".", 1)[0]


def build_catalog(
    *,
    chip: str,
    ncu_version: str,
    collections: Mapping[str, tuple[Sequence[QueryRow], Sequence[QueryRow] | None]],
    source: str = "",
) -> dict[str, Any]:
    """The compact catalog dict for one chip.

    ``collections`` maps a query collection (``profiling``, ``launch``...) to its
    (base-mode rows, all-mode rows or None when that query failed). A base whose full
    names include other suffixes needs one of them; a base listed only as itself is
    valid as is. A full name with no listed base becomes its own valid-as-is entry.
    When the all-mode list is missing, the base's suffixes are unknown (``s`` is -1).
    """
    suffix_sets: list[list[str]] = []
    set_index: dict[tuple[str, ...], int] = {}

    def intern(suffixes: Iterable[str]) -> int:
        key = tuple(sorted(set(suffixes)))
        if key not in set_index:
            set_index[key] = len(suffix_sets)
            suffix_sets.append(list(key))
        return set_index[key]

    out_collections: dict[str, list[list[Any]]] = {}
    for coll, (base_rows, all_rows) in collections.items():
        bases: dict[str, QueryRow] = {r.name: r for r in base_rows}
        suffixes: dict[str, set[str]] = {name: set() for name in bases}
        orphans: dict[str, QueryRow] = {}
        for r in all_rows or ():
            base = _find_base(r.name, bases)
            if base is None:
                orphans.setdefault(r.name, r)
            else:
                suffixes[base].add(r.name[len(base) + 1 :] if r.name != base else "")
        entries: list[list[Any]] = []
        for name, row in bases.items():
            sfx = suffixes[name]
            if all_rows is None:
                idx = -1
            else:
                if len(sfx - {""}) > 0:
                    sfx = sfx - {""}  # ncu lists the base too; a bare base needs a suffix
                idx = intern(sfx or {""})
            entries.append([name, row.type, row.unit, row.description, idx])
        for name, row in orphans.items():
            entries.append([name, row.type, row.unit, row.description, intern({""})])
        entries.sort(key=lambda e: str(e[0]))
        out_collections[coll] = entries
    return {
        "format": CATALOG_FORMAT,
        "chip": chip,
        "ncu_version": ncu_version,
        "source": source,
        "suffix_sets": suffix_sets,
        "collections": out_collections,
    }


def dump_catalog(catalog: Mapping[str, Any]) -> bytes:
    """Gzip-compressed compact JSON of a catalog (deterministic: no timestamp in the gzip)."""
    raw = json.dumps(catalog, separators=(",", ":"), ensure_ascii=False).encode()
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0) as f:
        f.write(raw)
    return buf.getvalue()


def load_catalog_bytes(data: bytes) -> dict[str, Any]:
    """Inverse of `dump_catalog`; raises ValueError on a wrong format."""
    obj = json.loads(gzip.decompress(data))
    if not isinstance(obj, dict) or obj.get("format") != CATALOG_FORMAT:
        raise ValueError(f"not a catalog of format {CATALOG_FORMAT}")
    return obj
