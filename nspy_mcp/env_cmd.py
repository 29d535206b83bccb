"""`nspy-mcp env` and `nspy-mcp metrics`: the probe and the metric check, for people.

Both print a short human report by default and the model's JSON with ``--json``;
``env --deep`` adds the canary jobs (`nspy_mcp.canaries`).
Exit codes: ``env`` 0 (it reports, it does not judge, a missed canary included); ``metrics`` 0 when every name is
valid, 1 when any is unknown or needs a suffix, 2 when names could not be checked (no
catalog for the chip) or the chip is unknown.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from nsight_core.errors import NsightCoreError
from nsight_core.host.catalog import MetricsValidation, validate_metrics
from nsight_core.host.probe import EnvironmentReport, PackageStatus, probe_environment
from nsight_core.host.report import CanaryCheck, GpuInfo
from nsight_core.plan.config import EngineConfig


def _w(line: str = "") -> None:
    sys.stdout.write(line + "\n")


def _package_state(pkg: PackageStatus) -> str:
    """Version (or 'not installed') then the note, without repeating what the note says first."""
    state = pkg.version or ("installed, version unknown" if pkg.installed else "not installed")
    note = pkg.note.removeprefix(f"{state}: ").removeprefix(state)
    return f"{state}: {note}" if note else state


def _gpu_lines(g: GpuInfo) -> list[str]:
    """Under a GPU's line: its measured ceilings, if calibrated, and its processes."""
    lines = []
    if g.stream_bytes_per_s is not None and g.dense_bf16_flops is not None:
        sheet = g.datasheet_bytes_per_s
        beside = f" (datasheet {sheet / 1e12:.2f} TB/s)" if sheet else ""
        lines.append(
            f"       measured: streaming {g.stream_bytes_per_s / 1e12:.2f} TB/s{beside}, "
            f"dense bf16 {g.dense_bf16_flops / 1e12:.0f} TFLOP/s"
        )
    lines += [
        f"       pid {p.pid} {p.name or '?'} {p.used_memory_mib or '?'} MiB" for p in g.processes
    ]
    return lines


def format_environment(r: EnvironmentReport) -> str:
    """The report as a few aligned lines."""
    out: list[str] = []
    add = out.append
    add(f"host      {r.host} ({r.platform}), Python {r.python}")
    drv = f"driver {r.driver_version}, CUDA {r.cuda_driver_version}" if r.driver_version else ""
    add(f"gpus      {len(r.gpus)} via {r.gpu_source}" + (f"; {drv}" if drv else ""))
    if r.gpu_error and not r.gpus:
        add(f"          {r.gpu_error}")
    for g in r.gpus:
        mem = f"{g.memory_used_mib}/{g.memory_total_mib} MiB" if g.memory_total_mib else "?"
        add(
            f"  [{g.index}] {g.name} cc {g.compute_capability} chip {g.chip or '?'} "
            f"mem {mem} sm {g.sm_clock_mhz} MHz {g.temperature_c} C "
            f"{len(g.processes)} process(es)"
        )
        out.extend(_gpu_lines(g))
    if r.ncu_problem:
        add(f"ncu       none used: {r.ncu_problem}")
    elif not r.ncu:
        add("ncu       none found (PATH, NSPY_NCU)")
    for n in r.ncu:
        mark = "*" if n.used else " "
        modes = "launch" + (" attach" if n.attach_mode_ok else "") if n.launch_mode_ok else "-"
        add(f"ncu     {mark} {n.version or n.error} {n.path} [{n.source}] modes: {modes}")
    for pkg in (r.ncu_report, r.cupti_python):
        add(f"{pkg.name:<13s}{_package_state(pkg)}")
    c = r.counters
    add(
        f"counters  RmProfilingAdminOnly={c.rm_profiling_admin_only} admin={c.is_admin} "
        f"deep test: {c.deep_test}" + (f" ({c.detail})" if c.detail else "")
    )
    fw = ", ".join(f"{f.name} {f.version}" for f in r.frameworks if f.installed)
    add(f"python    {fw or 'no torch/triton/cupy/numpy'}")
    for b in r.backends:
        add(f"backend   {b.name:<7s}{'yes' if b.available else 'no ':<4s}{b.reason}")
    if r.sandbox is not None:
        sb = r.sandbox
        mem = f"{sb.memory_limit_bytes / 1024**3:.1f} GiB" if sb.memory_limit_bytes else "none"
        add(f"sandbox   dies with server: {sb.parent_death}; strays: {sb.descendants}")
        land = f"Landlock ABI {sb.landlock_abi}" if sb.landlock_abi else "no Landlock"
        add(f"          memory limit {mem} ({sb.memory_limit_source}); {land}")
    for name, check in (r.canaries or {}).items():
        add(f"canaries  {name:<7s}{_canary_line(check)}")
        out.extend(f"          missed {m}" for m in check.missed)
    for fix in r.remediation:
        add(f"todo      {fix}")
    return "\n".join(out)


def _canary_line(c: CanaryCheck) -> str:
    if c.ok is None:
        return c.note
    verdict = "guards hold" if c.ok else "GUARDS FAILED"
    line = f"{c.caught}/{c.total} hacks caught, control {c.control}: {verdict} ({c.wall_s:.1f} s)"
    return f"{line}; {c.note}" if c.note else line


def run_env(*, deep: bool, refresh: bool, as_json: bool, config: EngineConfig) -> int:
    report = probe_environment(config, deep=deep, refresh=refresh, memory_setting=config.job_memory)
    if deep:
        from nspy_mcp.canaries import with_canaries  # lazy: the engine's jobs, for --deep only

        report = with_canaries(report, config)
    _w(report.model_dump_json(indent=2) if as_json else format_environment(report))
    return 0


def format_validation(v: MetricsValidation) -> str:
    out = [
        f"chip {v.chip} ({v.chip_source}), catalog: {v.catalog_source}"
        + (f" ncu {v.catalog_ncu_version}" if v.catalog_ncu_version else "")
    ]
    for m in v.metrics:
        line = f"  {m.status:<12s} {m.name}"
        if m.status == "valid":
            line += f"  [{m.unit or '-'}] {m.description or ''}"
        else:
            line += f"  {m.message}"
        out.append(line)
        if m.status == "needs_suffix":
            out.extend(f"      {n}" for n in m.valid_names)
    if v.estimated_passes is not None:
        out.append(f"estimated replay passes: {v.estimated_passes} (heuristic)")
    out.extend(f"note: {n}" for n in v.notes)
    return "\n".join(out)


def _cli_hint(note: str) -> str:
    """The engine's notes name the tool argument `chip=`; on the command line it is `--chip`."""
    return note.replace("pass chip=", "pass --chip")


def run_metrics(
    names: Sequence[str], *, chip: str | None, as_json: bool, config: EngineConfig
) -> int:
    try:
        v = validate_metrics(list(names), chip, config=config)
    except NsightCoreError as exc:
        if as_json:
            import json

            _w(json.dumps(exc.to_dict(), indent=2))
        else:
            sys.stderr.write(f"error: {exc}\n")
        return 2
    v = v.model_copy(update={"notes": [_cli_hint(n) for n in v.notes]})
    _w(v.model_dump_json(indent=2) if as_json else format_validation(v))
    if v.all_valid:
        return 0
    if any(m.status in ("unknown", "needs_suffix") for m in v.metrics):
        return 1
    return 2
