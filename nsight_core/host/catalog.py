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
  ``--query-metrics-mode all`` (every full name), run by `sandbox.run_command`, parsed here
  with the same code the recorder uses, and cached per (ncu version, chip).

Chip names (the GPU -> chip table, ``ncu --list-chips`` parsing) belong to
`nsight_core.host.ncu_install`.

The parser is tolerant: it reads ncu's ``--csv`` form (columns found by header, not by
position) and the aligned text table (column widths from the dashed rule under the header),
and skips ``==PROF==``/``==WARNING==`` lines, device headers and blank lines.

Size: about 750 lines: offline catalogs, live ncu queries and the name-matching rules share
one data model; the live query runner and discovery already live in ncu_install/sandbox.
"""

from __future__ import annotations

import contextlib
import csv
import difflib
import gzip
import io
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.host.ncu_install import DEFAULT_CHIP, parse_list_chips, table_chips
from nsight_core.host.probe import cache_dir, probe_environment
from nsight_core.processes.sandbox import run_command
from nsight_core.request import DEFAULT_METRIC

CATALOG_FORMAT = 1
"""Version of the JSON layout below; bump it when the layout changes."""

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


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


# --------------------------------------------------------------------------------------
# Loading and indexing
# --------------------------------------------------------------------------------------

SHIPPED_DIR = Path(__file__).parents[1] / "data" / "catalogs"
LIVE_QUERY_TIMEOUT_S = 120.0
COLLECTION_ORDER = ("profiling", "launch", "device", "occupancy")

# The suffixes shown first when a base needs one: the usual way each type is read.
_PREFERRED_SUFFIXES = (
    "avg.pct_of_peak_sustained_elapsed",
    "sum",
    "pct",
    "ratio",
    "avg",
    "max",
    "min",
    "sum.per_second",
    "avg.per_cycle_active",
    "sum.pct_of_peak_sustained_elapsed",
    "max.pct_of_peak_sustained_elapsed",
    "sum.per_cycle_elapsed",
)


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
            by_prefix.setdefault(_unit_prefix(name), []).append(name)
        return cls(str(cat["chip"]), str(cat["ncu_version"]), source, bases, by_prefix)

    def lookup(self, full: str) -> tuple[MetricInfo, str] | None:
        """(base, suffix) for a full or base name, by its longest listed base prefix."""
        base = _find_base(full, self.bases)
        if base is None:
            return None
        return self.bases[base], full[len(base) + 1 :] if full != base else ""


def _unit_prefix(name: str) -> str:
    return name.split("__", 1)[0] if "__" in name else ""


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


def query_live_catalog(ncu: str, ncu_version: str, chip: str) -> CatalogIndex:
    """Catalog from a live ``ncu --query-metrics --chips CHIP``, cached per (version, chip)
    in memory and under the user cache directory. Raises NsightCoreError(PROFILER_ERROR)."""
    vdir = catalog_version_dir(ncu_version)
    key = ("live", vdir, chip)
    if key in _index_cache:
        return _index_cache[key]
    path = cache_dir() / "catalogs" / vdir / f"{chip}.json.gz"
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


# --------------------------------------------------------------------------------------
# validate_metrics
# --------------------------------------------------------------------------------------

MetricStatus = Literal["valid", "unknown", "needs_suffix", "unverified"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MetricCheck(_Model):
    name: str = Field(description="The name as given.")
    status: MetricStatus = Field(
        description="valid: ncu accepts it as one value; needs_suffix: a base name, pick one "
        "of valid_names; unknown: not in the catalog, see suggestions; unverified: no catalog "
        "could decide (see notes)."
    )
    base: str | None = Field(None, description="The catalog's base metric it belongs to.")
    suffix: str | None = Field(None, description="Roll-up and suffix after the base, if any.")
    type: str | None = Field(None, description="ncu metric type: Counter, Ratio, Throughput...")
    unit: str | None = Field(
        None, description="Unit of the base; for pct/per_second/per_cycle suffixes derived."
    )
    description: str | None = Field(None, description="ncu's description of the base.")
    valid_names: list[str] = Field(
        default_factory=list,
        description="For needs_suffix: full names to use instead, the usual ones first.",
    )
    suffix_count: int | None = Field(None, description="How many suffixes the base accepts.")
    suggestions: list[str] = Field(
        default_factory=list, description="For unknown: the nearest valid names."
    )
    message: str = Field("", description="What to do next.")


class MetricsValidation(_Model):
    chip: str = Field(description="ncu chip the names were checked for, e.g. 'gh100'.")
    chip_source: Literal["argument", "gpu", "default"] = Field(
        description="argument: as given; gpu: inferred from GPU 0; default: no GPU, assumed."
    )
    catalog_source: Literal["shipped", "live", "none"] = Field(
        description="shipped: bundled catalog; live: this host's ncu; none: no catalog found."
    )
    catalog_ncu_version: str | None = Field(None, description="ncu that recorded the catalog.")
    metrics: list[MetricCheck]
    all_valid: bool = Field(description="True when every name is valid.")
    estimated_passes: int | None = Field(
        None,
        description="Rough replay passes per kernel for these metrics (heuristic; ncu prints "
        "the real count as 'N passes').",
    )
    notes: list[str] = Field(default_factory=list)


def _suffix_unit(unit: str, suffix: str) -> str:
    last = suffix.rsplit(".", 1)[-1]
    if last == "pct" or last.startswith("pct_of_peak"):
        return "%"
    if last == "per_second":
        return f"{unit}/second" if unit else "1/second"
    if last.startswith("per_cycle"):
        return f"{unit}/cycle" if unit else "1/cycle"
    if last == "ratio":
        return "ratio"
    return unit


def _ordered_suffixes(suffixes: frozenset[str]) -> list[str]:
    rank = {s: i for i, s in enumerate(_PREFERRED_SUFFIXES)}
    return sorted((s for s in suffixes if s), key=lambda s: (rank.get(s, len(rank)), s))


def _suggest(idx: CatalogIndex, name: str, n: int = 5) -> list[str]:
    """Nearest valid full names for an unknown ``name``: first its base among bases of the
    same unit prefix (a few hundred), then the suffix among that base's suffixes."""
    found = idx.lookup(name)
    if found is not None:
        info, suffix = found
        pool = sorted(info.suffixes or ())
        close = difflib.get_close_matches(suffix, pool, n=n, cutoff=0.5)
        return [f"{info.name}.{s}" if s else info.name for s in close]
    base, _, suffix = name.partition(".")
    prefix = _unit_prefix(base)
    pool_names = idx.by_prefix.get(prefix)
    if not pool_names:
        near = difflib.get_close_matches(prefix, list(idx.by_prefix), n=3, cutoff=0.5)
        pool_names = [b for p in near for b in idx.by_prefix[p]]
    bases = difflib.get_close_matches(base, pool_names, n=n, cutoff=0.6)
    if not bases:
        bases = difflib.get_close_matches(base, list(idx.bases), n=n, cutoff=0.75)
    out = []
    for b in bases:
        info = idx.bases[b]
        sfx = info.suffixes or frozenset()
        if suffix and suffix in sfx:
            out.append(f"{b}.{suffix}")
        elif "" in sfx or not sfx:
            out.append(b)
        else:
            out.append(f"{b}.{_ordered_suffixes(sfx)[0]}")
    return out


def check_metric(idx: CatalogIndex, name: str) -> MetricCheck:
    """Check one name against one catalog."""
    raw = name.strip()
    if raw.split(":", 1)[0] in ("regex", "group", "breakdown", "pmsampling") and ":" in raw:
        return MetricCheck(
            name=name,
            status="unverified",
            message="prefixed expressions are expanded by ncu itself; list the full names "
            "instead so each row has one metric",
        )
    found = idx.lookup(raw) if _NAME_RE.match(raw) else None
    if found is None:
        sugg = _suggest(idx, raw) if raw else []
        hint = f"; did you mean {', '.join(sugg[:3])}?" if sugg else ""
        return MetricCheck(
            name=name,
            status="unknown",
            suggestions=sugg,
            message=f"{raw!r} is not a {idx.chip} metric in ncu {idx.ncu_version}{hint}",
        )
    info, suffix = found
    common = {
        "base": info.name,
        "suffix": suffix or None,
        "type": info.type or None,
        "description": info.description or None,
        "unit": _suffix_unit(info.unit, suffix) or None,
    }
    if info.suffixes is None:
        return MetricCheck(
            name=name,
            status="unverified",
            **common,
            message="the catalog lists this base but not its suffixes",
        )
    if suffix in info.suffixes:
        return MetricCheck(name=name, status="valid", suffix_count=len(info.suffixes), **common)
    ordered = _ordered_suffixes(info.suffixes)
    if not suffix:
        full = [f"{info.name}.{s}" for s in ordered[:12]]
        return MetricCheck(
            name=name,
            status="needs_suffix",
            valid_names=full,
            suffix_count=len(ordered),
            **common,
            message=f"{info.name} is a base name: add a roll-up and suffix, e.g. {full[0]}"
            + (f" or {full[1]}" if len(full) > 1 else "")
            + f" ({len(ordered)} valid suffixes)",
        )
    completions = [f"{info.name}.{s}" for s in ordered if s.startswith(suffix + ".")]
    if completions:
        # A roll-up without its suffix (`sm__throughput.avg`): name the completions.
        return MetricCheck(
            name=name,
            status="needs_suffix",
            valid_names=completions[:12],
            suffix_count=len(ordered),
            **common,
            message=f"{raw} needs a suffix; did you mean {completions[0]}"
            + (f" or {completions[1]}" if len(completions) > 1 else "")
            + "?",
        )
    sugg = _suggest(idx, raw)
    return MetricCheck(
        name=name,
        status="unknown",
        suggestions=sugg,
        suffix_count=len(ordered),
        **common,
        message=f"{info.name} has no suffix {suffix!r}"
        + (f"; did you mean {', '.join(sugg[:3])}?" if sugg else ""),
    )


def estimate_passes(checks: Sequence[MetricCheck], idx: CatalogIndex | None) -> int | None:
    """A rough replay-pass count; documented as a heuristic, never a measurement.

    launch__/device__ attributes and gpu__time_duration need no extra pass; each other
    distinct Counter/Ratio base is one counter, a Throughput base (a max over several
    sub-unit counters) about four; one pass is assumed to hold about eight counters.
    """
    if idx is None:
        return None
    counters = 0
    for base in {c.base for c in checks if c.base}:
        info = idx.bases[base]
        if info.collection != "profiling" or base == "gpu__time_duration":
            continue
        counters += 4 if info.type.lower() == "throughput" else 1
    return 1 + -(-counters // 8)


def known_chips() -> list[str]:
    """Chips this module can name: shipped catalogs plus the architecture table."""
    chips = set(table_chips())
    for cs in shipped_catalogs().values():
        chips.update(cs)
    return sorted(chips)


def _resolve_chip(
    chip: str | None, notes: list[str]
) -> tuple[str, Literal["argument", "gpu", "default"]]:
    if chip:
        return chip.strip().lower(), "argument"
    env = probe_environment()
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


def _used_ncu() -> tuple[str, str] | None:
    env = probe_environment()
    used = next((n for n in env.ncu if n.used), None)
    if used and used.version and used.launch_mode_ok:
        return used.path, used.version
    return None


def _select_catalog(
    chip: str, source: Literal["auto", "shipped", "live"], notes: list[str]
) -> CatalogIndex | None:
    shipped = shipped_catalogs()
    ncu = _used_ncu() if source != "shipped" else None
    if ncu is not None:
        vdir = catalog_version_dir(ncu[1])
        if source == "auto" and chip in shipped.get(vdir, []):
            return load_shipped(chip, vdir)
        try:
            return query_live_catalog(ncu[0], ncu[1], chip)
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


def warm_metric_check() -> None:
    """Read, once per process, what a first metric check needs: the environment probe (GPU,
    ncu's version, cupti) and this chip's catalog. A server calls it in a thread at its very
    start, so a first request finds them read or waits only for the rest of that one read.
    Failures are the request's own to report, so none is raised here."""
    with contextlib.suppress(Exception):
        validate_metrics([DEFAULT_METRIC])


def validate_metrics(
    names: Sequence[str],
    chip: str | None = None,
    *,
    source: Literal["auto", "shipped", "live"] = "auto",
) -> MetricsValidation:
    """Check ncu metric names for a chip, offline from shipped catalogs or live from ncu.

    ``chip`` defaults to GPU 0's chip, else gh100 (with a note). An unknown chip raises
    NsightCoreError(INVALID_REQUEST) listing the known ones. ``source``: ``auto`` prefers a
    shipped catalog of this host's ncu version, then a live (cached) query, then the nearest
    shipped version; ``shipped`` never runs ncu; ``live`` always asks ncu.
    """
    notes: list[str] = []
    chip_name, chip_source = _resolve_chip(chip, notes)
    known = known_chips()
    if chip_name not in known and not (
        source != "shipped"
        and (ncu := _used_ncu()) is not None
        and chip_name in _live_chips(ncu[0])
    ):
        raise NsightCoreError(
            ErrorClass.INVALID_REQUEST,
            f"unknown chip {chip_name!r}",
            f"use one of: {', '.join(known)} (H100/H200 are gh100, A100 ga100)",
        )
    idx = _select_catalog(chip_name, source, notes)
    if idx is None:
        checks = [
            MetricCheck(name=n, status="unverified", message="no catalog for this chip")
            for n in names
        ]
    else:
        checks = [check_metric(idx, n) for n in names]
        if source == "auto" and idx.source == "shipped" and _used_ncu() is None:
            notes.append(
                f"offline check against the shipped {idx.chip} catalog of ncu {idx.ncu_version}"
            )
    return MetricsValidation(
        chip=chip_name,
        chip_source=chip_source,
        catalog_source=idx.source if idx else "none",
        catalog_ncu_version=idx.ncu_version if idx else None,
        metrics=checks,
        all_valid=bool(checks) and all(c.status == "valid" for c in checks),
        estimated_passes=estimate_passes(checks, idx),
        notes=notes,
    )


_live_chip_cache: dict[str, list[str]] = {}


def _live_chips(ncu: str) -> list[str]:
    if ncu not in _live_chip_cache:
        r = run_command([ncu, "--list-chips"], 30.0)
        _live_chip_cache[ncu] = parse_list_chips(r.stdout.text()) if r.exit_code == 0 else []
    return _live_chip_cache[ncu]
