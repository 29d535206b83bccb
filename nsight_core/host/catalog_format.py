"""A metric catalog's form: parsed from ncu's text, stored compact, read back into an index.

Both ends of the format sit together: `tools/record_catalogs.py` parses ncu's output and
builds the compact dict here on a GPU host, and the server reads the same dict back into a
`CatalogIndex`. Bumping `CATALOG_FORMAT` is therefore a change to one module.

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
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

CATALOG_FORMAT = 1
"""Version of the JSON layout below; bump it when the layout changes."""

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


class QueryRow(NamedTuple):
    """One row of ``ncu --query-metrics`` output; empty strings where ncu printed none."""

    name: str
    type: str
    unit: str
    description: str


# --------------------------------------------------------------------------------------
# Parsing ncu's text
# --------------------------------------------------------------------------------------


def catalog_version_dir(ncu_version: str) -> str:
    """Directory name for a catalog recorded by ncu ``ncu_version``: major.minor.patch."""
    return ".".join(ncu_version.split(".")[:3])


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
        if not NAME_RE.match(first):
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
        if _is_noise(line) or stripped.lower().startswith(("device ", "chip ")):
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
        if not NAME_RE.match(name) or (not header_seen and len(parts) > 1 and " " in name):
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


# --------------------------------------------------------------------------------------
# Indexing
# --------------------------------------------------------------------------------------

COLLECTION_ORDER = ("profiling", "launch", "device", "occupancy")


@dataclass(frozen=True)
class MetricInfo:
    name: str
    type: str
    unit: str
    description: str
    suffixes: frozenset[str] | None
    """Valid suffixes ('' = the base itself); None when the recording had no full names."""
    collection: str


@dataclass
class CatalogIndex:
    """One chip's catalog, indexed by base name, and by unit prefix for suggestions."""

    chip: str
    ncu_version: str
    source: Literal["shipped", "live"]
    bases: dict[str, MetricInfo]
    by_prefix: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, cat: Mapping[str, Any], source: Literal["shipped", "live"]) -> CatalogIndex:
        sets = [frozenset(s) for s in cat["suffix_sets"]]
        bases: dict[str, MetricInfo] = {}
        colls = cat["collections"]
        rank = {c: i for i, c in enumerate(COLLECTION_ORDER)}
        for coll in sorted(colls, key=lambda c: (rank.get(c, len(rank)), c)):
            for name, typ, unit, desc, idx in colls[coll]:
                if name not in bases:
                    sfx = sets[idx] if idx >= 0 else None
                    bases[name] = MetricInfo(name, typ, unit, desc, sfx, coll)
        by_prefix: dict[str, list[str]] = {}
        for name in bases:
            by_prefix.setdefault(unit_prefix(name), []).append(name)
        return cls(str(cat["chip"]), str(cat["ncu_version"]), source, bases, by_prefix)

    def lookup(self, full: str) -> tuple[MetricInfo, str] | None:
        """(base, suffix) for a full or base name, by its longest listed base prefix."""
        base = _find_base(full, self.bases)
        if base is None:
            return None
        return self.bases[base], full[len(base) + 1 :] if full != base else ""


def unit_prefix(name: str) -> str:
    return name.split("__", 1)[0] if "__" in name else ""
