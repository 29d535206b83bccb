#!/usr/bin/env python3
"""Record ncu metric catalogs for every chip this ncu knows, on a host that has ncu.

    python tools/record_catalogs.py OUT [--ncu PATH] [--chips gh100,ga100] [--bundle DIR]
    python tools/record_catalogs.py --from-raw RAW OUT       # rebuild catalogs, no ncu needed

Per chip it runs (each under a time limit, killed with its process group on expiry):

    ncu --query-metrics --chips C --csv                             base names, type, unit, text
    ncu --query-metrics --chips C --query-metrics-mode all --csv    every full name
    ... and the same two for the ``launch``, ``device`` and ``occupancy`` collections

and writes ``OUT/<ncu-version>/<chip>.json.gz`` (the layout shipped under
``nsight_core/data/catalogs/``). A query that fails is reported and skipped; a chip whose
base query fails gets no catalog. The raw outputs are kept, gzipped, under
``OUT/raw/<ncu-version>/`` (``--raw gh100`` by default, ``--raw all`` for every chip), so
catalogs can be rebuilt offline with ``--from-raw`` if the parser changes. For gh100 it also
saves the plain-text ``ncu --query-metrics --chips gh100`` output as
``OUT/fixture-gh100-query-metrics.txt.gz`` (a parser test fixture for tests/data/).

Only the standard library is needed to run the queries: the tool uses the stdlib-only
``nsight_core.processes.sandbox`` (bounded runs) and ``nsight_core.host.ncu_install`` (finding ncu, its
version, its chip list), loaded from this checkout without the package's ``__init__`` when
that cannot be imported (a bare GPU host without pydantic). Building the catalogs uses the
parser in ``nsight_core.host.catalog``; where that cannot be imported, the raw outputs are still
written and the summary says to run ``--from-raw`` where nsight_core is installed.

``--bundle DIR`` packs the results into at most a few tar files in DIR (catalogs in one, raw
outputs in parts of at most 15 MiB), for transports that limit the number of files.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tarfile
import time
import types
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]


def _import_stdlib_parts() -> None:
    """Make ``nsight_core.processes.sandbox`` and ``nsight_core.host.ncu_install`` importable on a bare host.

    They need only the standard library, but importing them runs the package's
    ``__init__``, which needs pydantic. When that fails, an empty package object pointing
    at this checkout's ``nsight_core/`` stands in, so only the modules asked for are loaded.
    """
    if str(_ROOT) not in sys.path:
        sys.path.insert(0, str(_ROOT))
    try:
        import nsight_core  # noqa: F401
    except ImportError:
        for name in [m for m in sys.modules if m.split(".")[0] == "nsight_core"]:
            del sys.modules[name]
        bare = types.ModuleType("nsight_core")
        bare.__path__ = [str(_ROOT / "nsight_core")]
        sys.modules["nsight_core"] = bare


_import_stdlib_parts()

from nsight_core.host import ncu_install  # noqa: E402
from nsight_core.plan.config import EngineConfig  # noqa: E402
from nsight_core.processes.sandbox import run_command  # noqa: E402

QUERY_TIMEOUT_S = 300.0
"""A full-name query of one chip took about a second on the H200; this is generous."""

COLLECTIONS = ("profiling", "launch", "device", "occupancy")
MODES = ("base", "all")
RAW_PART_BYTES = 15 * 1024 * 1024


def _run(cmd: list[str], timeout_s: float) -> tuple[int, str, str]:
    """(rc, stdout, stderr) of ``cmd`` run by `sandbox.run_command` (own process group,
    killed with it at ``timeout_s``); rc is 124 on timeout, 127 when it could not start,
    128 + N when signal N ended it, and stderr then says why."""
    r = run_command(cmd, timeout_s)
    if r.exit_code is not None:
        return r.exit_code, r.stdout.text(), r.stderr.text()
    rc = 124 if r.timed_out else 127 if r.signal_name is None else 128
    return rc, r.stdout.text(), r.message


def _query_cmd(ncu: str, chip: str, collection: str, mode: str, csv: bool = True) -> list[str]:
    cmd = [ncu, "--query-metrics", "--chips", chip]
    if collection != "profiling":
        cmd += ["--query-metrics-collection", collection]
    if mode != "base":
        cmd += ["--query-metrics-mode", mode]
    if csv:
        cmd.append("--csv")
    return cmd


def _raw_name(chip: str, collection: str, mode: str) -> str:
    return f"{chip}.{collection}.{mode}.csv.gz"


def _import_catalog() -> Any:
    """nsight_core.host.catalog, from the installed package or this checkout; None if unavailable."""
    try:
        import nsight_core.host.catalog as catalog
    except ImportError as exc:
        sys.stderr.write(
            f"note: cannot import nsight_core.host.catalog ({exc}); raw outputs only\n"
        )
        return None
    return catalog


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _sanity(chip: str, cat: dict[str, Any]) -> list[str]:
    """Warnings when well-known metrics are missing (they exist on every recent chip)."""
    entries = {e[0]: e for e in cat["collections"].get("profiling", [])}
    warn = []
    for base, suffix in (
        ("gpu__time_duration", "sum"),
        ("dram__throughput", "avg.pct_of_peak_sustained_elapsed"),
        ("sm__throughput", "avg.pct_of_peak_sustained_elapsed"),
    ):
        e = entries.get(base)
        if e is None:
            warn.append(f"{chip}: base {base} missing")
        elif e[4] < 0 or suffix not in cat["suffix_sets"][e[4]]:
            warn.append(f"{chip}: {base}.{suffix} not among the recorded full names")
    return warn


def build_from_raw(catalog: Any, version: str, chip: str, texts: dict[tuple[str, str], str]) -> Any:
    """Catalog dict from raw query texts keyed by (collection, mode); None without base rows."""
    colls: dict[str, Any] = {}
    for coll in COLLECTIONS:
        base_text = texts.get((coll, "base"))
        if base_text is None:
            continue
        base_rows = catalog.parse_query_metrics(base_text)
        if not base_rows:
            continue
        all_text = texts.get((coll, "all"))
        all_rows = catalog.parse_query_metrics(all_text) if all_text is not None else None
        colls[coll] = (base_rows, all_rows or None)
    if "profiling" not in colls:
        return None
    return catalog.build_catalog(
        chip=chip,
        ncu_version=version,
        collections=colls,
        source=f"ncu {version} --query-metrics --chips {chip} (--query-metrics-mode all)",
    )


def _find_ncu(args: argparse.Namespace) -> tuple[str, str, list[str]] | str:
    """(ncu path, version, chips), or an error message."""
    found = ncu_install.discover_ncu(EngineConfig.from_env())
    ncu = args.ncu or found.used
    if not ncu:
        return f"{found.problem}; pass --ncu PATH"
    version, why = ncu_install.query_ncu_version(ncu)
    if not version:
        return f"`{ncu} --version`: {why}"
    rc, text, err = _run([ncu, "--list-chips"], 60)
    if args.chips:
        chips = sorted({c.strip().lower() for c in args.chips.split(",") if c.strip()})
    else:
        chips = ncu_install.parse_list_chips(text)
    if not chips:
        return f"`ncu --list-chips` gave no chips (rc={rc}): {(text + err)[:300]}"
    vdir = ".".join(version.split(".")[:3])
    raw_dir = Path(args.out) / "raw" / vdir
    _write(raw_dir / "list-chips.txt.gz", gzip.compress(text.encode(), mtime=0))
    _write(raw_dir / "ncu-version.txt", version.encode())
    return ncu, version, chips


def _run_queries(
    args: argparse.Namespace, ncu: str, chip: str, vdir: str
) -> tuple[dict[tuple[str, str], str], list[str]]:
    """Raw outputs keyed by (collection, mode), and the failed queries."""
    out = Path(args.out)
    texts: dict[tuple[str, str], str] = {}
    failures: list[str] = []
    for coll in COLLECTIONS:
        for mode in MODES:
            qrc, qout, qerr = _run(_query_cmd(ncu, chip, coll, mode), args.timeout)
            if qrc != 0 or not qout.strip():
                failures.append(f"{coll}/{mode}: rc={qrc} {qerr.strip()[:200]}")
                continue
            texts[(coll, mode)] = qout
            if args.raw == "all" or (args.raw == "gh100" and chip == "gh100"):
                raw = gzip.compress(qout.encode(), mtime=0)
                _write(out / "raw" / vdir / _raw_name(chip, coll, mode), raw)
        if ("profiling", "base") not in texts:
            break  # the chip is not queryable; skip its other collections
    if chip == "gh100":
        qrc, qout, _ = _run(_query_cmd(ncu, chip, "profiling", "base", False), 120)
        if qrc == 0:
            fix = gzip.compress(qout.encode(), mtime=0)
            _write(out / "fixture-gh100-query-metrics.txt.gz", fix)
    return texts, failures


def _record_chip(
    args: argparse.Namespace, catalog: Any, ncu: str, version: str, chip: str
) -> dict[str, Any]:
    t0 = time.monotonic()
    vdir = ".".join(version.split(".")[:3])
    texts, failures = _run_queries(args, ncu, chip, vdir)
    info: dict[str, Any] = {"failures": failures, "queried": ("profiling", "base") in texts}
    if catalog is not None and texts:
        try:
            cat = build_from_raw(catalog, version, chip, texts)
        except Exception as exc:  # a parser bug must not lose the other chips
            cat = None
            failures.append(f"build: {type(exc).__name__}: {exc}")
        if cat is not None:
            data = catalog.dump_catalog(cat)
            _write(Path(args.out) / vdir / f"{chip}.json.gz", data)
            info.update(
                metrics={k: len(v) for k, v in cat["collections"].items()},
                suffix_sets=len(cat["suffix_sets"]),
                bytes=len(data),
                warnings=_sanity(chip, cat),
            )
    info["seconds"] = round(time.monotonic() - t0, 2)
    n = info.get("metrics", {}).get("profiling", 0)
    status = "FAILED" if not info["queried"] else f"{n} base metrics" if catalog else "raw only"
    more = f"  ({len(failures)} query failures)" if failures else ""
    sys.stdout.write(
        f"  {chip:8s} {status:>18s} {info.get('bytes', 0):>9,d} B {info['seconds']:6.1f} s{more}\n"
    )
    for w in info.get("warnings", []):
        sys.stdout.write(f"    warning: {w}\n")
    return info


def _record(args: argparse.Namespace) -> int:
    t_start = time.monotonic()
    out = Path(args.out)
    catalog = _import_catalog()
    if catalog is None and args.raw != "all":
        sys.stdout.write("keeping raw outputs of every chip (--raw all) to build catalogs later\n")
        args.raw = "all"
    found = _find_ncu(args)
    if isinstance(found, str):
        sys.stderr.write(f"error: {found}\n")
        return 2
    ncu, version, chips = found
    vdir = ".".join(version.split(".")[:3])
    sys.stdout.write(f"ncu {version} at {ncu}; {len(chips)} chips: {', '.join(chips)}\n")
    summary: dict[str, Any] = {"ncu": ncu, "ncu_version": version, "chips": {}}
    for chip in chips:
        summary["chips"][chip] = _record_chip(args, catalog, ncu, version, chip)
    total = sum(int(c.get("bytes", 0)) for c in summary["chips"].values())
    summary["total_bytes"] = total
    summary["seconds"] = round(time.monotonic() - t_start, 1)
    _write(out / "summary.json", json.dumps(summary, indent=1).encode())
    ok = sum(1 for c in summary["chips"].values() if "bytes" in c)
    sys.stdout.write(
        f"{ok}/{len(chips)} chips catalogued, {total:,d} bytes of catalogs,"
        f" {summary['seconds']} s; details in {out / 'summary.json'}\n"
    )
    if catalog is None:
        sys.stdout.write(
            "catalogs not built here (nsight_core not importable): run"
            f" `python tools/record_catalogs.py --from-raw {out / 'raw'} {out}`"
            " where nsight_core is installed\n"
        )
    if args.bundle:
        _bundle(out, Path(args.bundle), vdir)
    return 0 if ok or catalog is None else 1


def _bundle(out: Path, dest: Path, vdir: str) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    cat_tar = dest / f"catalogs-{vdir}.tar"
    with tarfile.open(cat_tar, "w") as tf:
        for p in sorted((out / vdir).glob("*.json.gz")) if (out / vdir).is_dir() else []:
            tf.add(p, arcname=f"{vdir}/{p.name}")
        for extra in ("summary.json", "fixture-gh100-query-metrics.txt.gz"):
            if (out / extra).exists():
                tf.add(out / extra, arcname=extra)
    parts: list[list[Path]] = []
    size = RAW_PART_BYTES + 1
    for p in sorted((out / "raw").rglob("*.gz")) if (out / "raw").is_dir() else []:
        if size + p.stat().st_size > RAW_PART_BYTES:
            parts.append([])
            size = 0
        parts[-1].append(p)
        size += p.stat().st_size
    for i, files in enumerate(parts, 1):
        with tarfile.open(dest / f"raw-{vdir}-{i:02d}.tar", "w") as tf:
            for p in files:
                tf.add(p, arcname=str(p.relative_to(out)))
    sys.stdout.write(f"bundled into {dest}: {cat_tar.name} and {len(parts)} raw part(s)\n")


def _from_raw(args: argparse.Namespace) -> int:
    catalog = _import_catalog()
    if catalog is None:
        return 2
    raw = Path(args.from_raw)
    out = Path(args.out)
    groups: dict[tuple[str, str], dict[tuple[str, str], str]] = {}
    for p in sorted(raw.rglob("*.csv.gz")):
        parts = p.name[: -len(".csv.gz")].split(".")
        if len(parts) != 3:
            continue
        chip, coll, mode = parts
        vfile = p.parent / "ncu-version.txt"
        version = vfile.read_text().strip() if vfile.exists() else p.parent.name
        groups.setdefault((version, chip), {})[(coll, mode)] = gzip.decompress(
            p.read_bytes()
        ).decode(errors="replace")
    if not groups:
        sys.stderr.write(f"error: no <chip>.<collection>.<mode>.csv.gz files under {raw}\n")
        return 2
    total = 0
    for (version, chip), texts in sorted(groups.items()):
        cat = build_from_raw(catalog, version, chip, texts)
        if cat is None:
            sys.stdout.write(f"  {chip:8s} no base rows parsed; skipped\n")
            continue
        data = catalog.dump_catalog(cat)
        _write(out / ".".join(version.split(".")[:3]) / f"{chip}.json.gz", data)
        total += len(data)
        n = len(cat["collections"]["profiling"])
        sys.stdout.write(f"  {chip:8s} {n:6d} base metrics {len(data):>9,d} B\n")
        for w in _sanity(chip, cat):
            sys.stdout.write(f"    warning: {w}\n")
    sys.stdout.write(f"{len(groups)} raw chip sets, {total:,d} bytes of catalogs in {out}\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="output directory (catalogs land in OUT/<ncu-version>/)")
    ap.add_argument("--ncu", help="ncu executable (default: $NSPY_NCU, else first on PATH)")
    ap.add_argument("--chips", help="comma-separated chips (default: all of --list-chips)")
    ap.add_argument("--timeout", type=float, default=QUERY_TIMEOUT_S, help="seconds per query")
    ap.add_argument(
        "--raw",
        choices=("none", "gh100", "all"),
        default="gh100",
        help="which chips' raw outputs to keep under OUT/raw (default gh100)",
    )
    ap.add_argument("--bundle", help="also pack results into a few tar files in this directory")
    ap.add_argument("--from-raw", help="rebuild catalogs from a raw directory; runs no ncu")
    args = ap.parse_args(argv)
    return _from_raw(args) if args.from_raw else _record(args)


if __name__ == "__main__":
    sys.exit(main())
