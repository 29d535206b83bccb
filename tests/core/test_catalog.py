"""nsight_core.host.catalog: the catalog format, suggestions, and (once recorded
catalogs are shipped) validation against real ncu data.

The small catalogs built here come from `build_catalog` over rows written in the test: they
exercise our indexing and suggestion logic, not ncu's output format. The parser is tested on
the recorded ``ncu --query-metrics`` fixture and the shipped catalogs when those exist.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.host import catalog
from nsight_core.host.catalog import (
    CatalogIndex,
    QueryRow,
    build_catalog,
    check_metric,
    dump_catalog,
    load_catalog_bytes,
    shipped_catalogs,
    validate_metrics,
)
from nsight_core.plan.config import EngineConfig

FIXTURE = Path(__file__).parents[1] / "data" / "ncu-query-metrics-gh100.txt.gz"
SHIPPED = shipped_catalogs()
needs_shipped_gh100 = pytest.mark.skipif(
    not any("gh100" in chips for chips in SHIPPED.values()),
    reason="no shipped gh100 catalog yet: run tools/record_catalogs.py on a GPU host and copy "
    "its output to nsight_core/data/catalogs/",
)

SUFFIXES = ["sum", "avg", "max", "min", "sum.per_second", "avg.pct_of_peak_sustained_elapsed"]


def _small_index() -> CatalogIndex:
    bases = [
        QueryRow("dram__throughput", "Throughput", "%", "DRAM throughput"),
        QueryRow("dram__bytes_read", "Counter", "byte", "bytes read from DRAM"),
        QueryRow("gpu__time_duration", "Counter", "nsecond", "kernel duration"),
        QueryRow("sm__throughput", "Throughput", "%", "SM throughput"),
        QueryRow("smsp__inst_executed", "Counter", "inst", "warp instructions executed"),
    ]
    full = [QueryRow(f"{b.name}.{s}", b.type, b.unit, "") for b in bases for s in SUFFIXES]
    launch = [QueryRow("launch__grid_size", "Metric", "", "grid size")]
    cat = build_catalog(
        chip="gh100",
        ncu_version="2025.3.1.0",
        collections={"profiling": (bases, bases + full), "launch": (launch, launch)},
    )
    return CatalogIndex.from_dict(load_catalog_bytes(dump_catalog(cat)), "shipped")


def test_catalog_round_trips_through_gzip_and_stores_each_suffix_list_once() -> None:
    idx = _small_index()
    assert idx.bases["dram__throughput"].suffixes == frozenset(SUFFIXES)
    assert idx.bases["launch__grid_size"].suffixes == frozenset({""})
    with pytest.raises(ValueError):
        load_catalog_bytes(gzip.compress(b'{"format": 999}'))


def test_full_name_is_valid_with_unit_and_description() -> None:
    c = check_metric(_small_index(), "dram__throughput.avg.pct_of_peak_sustained_elapsed")
    assert (c.status, c.base, c.unit, c.type) == ("valid", "dram__throughput", "%", "Throughput")
    assert check_metric(_small_index(), "dram__bytes_read.sum.per_second").unit == "byte/second"


def test_base_name_needs_suffix_and_lists_usual_full_names_first() -> None:
    c = check_metric(_small_index(), "dram__throughput")
    assert c.status == "needs_suffix"
    assert c.valid_names[0] == "dram__throughput.avg.pct_of_peak_sustained_elapsed"
    assert "dram__throughput.sum.per_second" in c.valid_names
    assert c.suffix_count == len(SUFFIXES)


def test_typo_in_base_suggests_the_nearest_base_with_the_same_suffix() -> None:
    c = check_metric(_small_index(), "dram__througput.avg.pct_of_peak_sustained_elapsed")
    assert c.status == "unknown"
    assert c.suggestions[0] == "dram__throughput.avg.pct_of_peak_sustained_elapsed"


def test_typo_in_unit_prefix_still_finds_the_base() -> None:
    c = check_metric(_small_index(), "drma__bytes_read.sum")
    assert c.suggestions[:1] == ["dram__bytes_read.sum"]


def test_typo_in_suffix_suggests_the_nearest_suffix_of_that_base() -> None:
    c = check_metric(_small_index(), "gpu__time_duration.summ")
    assert c.status == "unknown"
    assert c.suggestions[0] == "gpu__time_duration.sum"


def test_attribute_without_suffixes_is_valid_as_is() -> None:
    assert check_metric(_small_index(), "launch__grid_size").status == "valid"


def test_regex_expression_is_reported_unverified() -> None:
    assert check_metric(_small_index(), "regex:dram__.*").status == "unverified"


def test_unknown_chip_is_an_invalid_request_naming_known_chips() -> None:
    with pytest.raises(NsightCoreError) as info:
        validate_metrics(
            ["gpu__time_duration.sum"],
            chip="zz999",
            source="shipped",
            config=EngineConfig.from_env(),
        )
    assert info.value.error_class is ErrorClass.INVALID_REQUEST
    assert "gh100" in info.value.hint


def test_replay_pass_estimate_grows_with_throughput_metrics() -> None:
    idx = _small_index()
    one = [check_metric(idx, "gpu__time_duration.sum")]
    many = [check_metric(idx, n) for n in ("dram__throughput.avg", "sm__throughput.avg")]
    assert catalog.estimate_passes(one, idx) == 1
    e = catalog.estimate_passes(one + many, idx)
    assert e is not None and e > 1


@pytest.mark.skipif(not FIXTURE.exists(), reason="recorded gh100 query fixture not added yet")
def test_recorded_gh100_query_output_parses_into_thousands_of_base_metrics() -> None:
    rows = catalog.parse_query_metrics(gzip.decompress(FIXTURE.read_bytes()).decode())
    names = {r.name for r in rows}
    assert len(rows) > 1000
    assert {"dram__throughput", "gpu__time_duration", "sm__throughput"} <= names
    assert all(r.unit or r.type for r in rows[:50])


@needs_shipped_gh100
def test_shipped_gh100_catalog_knows_the_default_metrics() -> None:
    v = validate_metrics(
        ["gpu__time_duration.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed"],
        chip="gh100",
        source="shipped",
        config=EngineConfig.from_env(),
    )
    assert v.all_valid, v.model_dump()
    assert v.catalog_source == "shipped"


@needs_shipped_gh100
def test_shipped_gh100_base_name_gets_suffix_advice() -> None:
    (c,) = validate_metrics(
        ["dram__throughput"], chip="gh100", source="shipped", config=EngineConfig.from_env()
    ).metrics
    assert c.status == "needs_suffix"
    assert "dram__throughput.avg.pct_of_peak_sustained_elapsed" in c.valid_names


@needs_shipped_gh100
def test_shipped_gh100_rollup_without_suffix_names_its_completions() -> None:
    (c,) = validate_metrics(
        ["sm__throughput.avg"], chip="gh100", source="shipped", config=EngineConfig.from_env()
    ).metrics
    assert c.status == "needs_suffix"
    assert c.valid_names[0] == "sm__throughput.avg.pct_of_peak_sustained_elapsed"
    assert all(n.startswith("sm__throughput.avg.") for n in c.valid_names)


@needs_shipped_gh100
def test_shipped_gh100_typos_get_the_right_suggestions() -> None:
    checks = validate_metrics(
        [
            "dram__througput.avg.pct_of_peak_sustained_elapsed",
            "gpu__time_duraton.sum",
            "sm__throughput.avg.pct_of_peak_sustained_elapsd",
        ],
        chip="gh100",
        source="shipped",
        config=EngineConfig.from_env(),
    ).metrics
    assert checks[0].suggestions[0] == "dram__throughput.avg.pct_of_peak_sustained_elapsed"
    assert checks[1].suggestions[0] == "gpu__time_duration.sum"
    assert "sm__throughput.avg.pct_of_peak_sustained_elapsed" in checks[2].suggestions


@needs_shipped_gh100
def test_every_shipped_catalog_loads_and_has_time_duration() -> None:
    for version, chips in SHIPPED.items():
        for chip in chips:
            idx = catalog.load_shipped(chip, version)
            assert len(idx.bases) > 100, (version, chip)
