"""One metric name checked against a catalog: valid, a base that needs a suffix, or unknown
with the nearest valid names.

The rules an agent meets most ("did you mean ...?") kept apart from where catalogs come from:
they need only a `CatalogIndex`, and the answer models are what `validate_metrics` returns.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from nsight_core.host.catalog_format import NAME_RE, CatalogIndex, unit_prefix

MetricStatus = Literal["valid", "unknown", "needs_suffix", "unverified"]


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
    chip: str = Field(description="ncu chip checked for, e.g. 'gh100'.")
    chip_source: Literal["argument", "gpu", "default"] = Field(
        description="gpu: GPU 0's; default: assumed (no GPU)."
    )
    catalog_source: Literal["shipped", "live", "none"] = Field(
        description="shipped: bundled; live: this host's ncu."
    )
    catalog_ncu_version: str | None = Field(None, description="ncu that recorded the catalog.")
    metrics: list[MetricCheck]
    all_valid: bool = Field(description="Every name is valid.")
    estimated_passes: int | None = Field(
        None,
        description="Rough replay passes per kernel (ncu prints the real 'N passes').",
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


MetricKind = Literal["total", "rate", "other"]

_RATE_SUFFIX = re.compile(r"pct(_\w+)?|ratio|per_\w+|peak_\w+|max_rate")
"""Last name parts of a rate or share: a percentage, ratio, per-second or per-cycle value, a
peak."""

MAX_NAMES_NOTED = 8
"""A note lists this many metric names, then says how many more there are."""


def metric_kind(name: str) -> MetricKind:
    """How the kernels of one call fold for a metric, from its name: the one rule behind
    `kernels.combine`'s default and the checks made before a job runs.

    A ``total`` (ncu's ``.sum`` roll-up: a time or a count; cupti's kernel durations are
    named the same way) adds up over a call's kernels, so summing them is sound. A ``rate``
    does not: two kernels at 60 % of peak are not at 120 %. Anything else (an average, an
    extreme, a name without a roll-up, an unknown name) is not known to add up; like a rate
    it needs one kernel per call or a reducer named for it. Whole-call metrics (the events
    backend's, cupti's span and latency) have one value per call, so no rule applies to them.
    """
    base, dot, last = name.rpartition(".")
    if not dot or not base:
        return "other"
    if last == "sum":
        return "total"
    return "rate" if _RATE_SUFFIX.fullmatch(last) else "other"


def unsummed_note(names: Sequence[str]) -> str | None:
    """What a call that launches several kernels meets for ``names`` when no reducer is named
    for them: None when every one is a total (summed by default)."""
    kinds = {n: metric_kind(n) for n in names}
    groups = (
        ([n for n, k in kinds.items() if k == "rate"], "a rate or percentage", "rates or percentages"),
        ([n for n, k in kinds.items() if k == "other"], "not a time or count total", "not time or count totals"),
    )  # fmt: skip
    parts = [
        f"{_listed(picked)} is {one}" if len(picked) == 1 else f"{_listed(picked)} are {many}"
        for picked, one, many in groups
        if picked
    ]
    if not parts:
        return None
    single = sum(len(picked) for picked, _, _ in groups) == 1
    return (
        "; ".join(parts)
        + ": a call that launches several kernels fails with kernel_count_mismatch unless "
        + f"kernels.combine names a reducer for {'it' if single else 'each'} (max, min, mean, "
        "first or last) or replay_mode is 'range'; times and counts (a .sum roll-up) are "
        "summed by default"
    )


def _listed(names: Sequence[str]) -> str:
    more = len(names) - MAX_NAMES_NOTED
    return ", ".join(names[:MAX_NAMES_NOTED]) + (f" and {more} more" if more > 0 else "")


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
    prefix = unit_prefix(base)
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
    found = idx.lookup(raw) if NAME_RE.match(raw) else None
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
    # A base name (`dram__throughput`) takes any of its suffixes; a roll-up without its
    # suffix (`sm__throughput.avg`) those that complete it.
    completions = [f"{info.name}.{s}" for s in ordered if not suffix or s.startswith(suffix + ".")]
    if completions:
        either = " or ".join(completions[:2])
        return MetricCheck(
            name=name,
            status="needs_suffix",
            valid_names=completions[:12],
            suffix_count=len(ordered),
            **common,
            message=f"{raw} needs a suffix; did you mean {either}?"
            if suffix
            else f"{info.name} is a base name: add a roll-up and suffix, e.g. {either} "
            f"({len(ordered)} valid suffixes)",
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
