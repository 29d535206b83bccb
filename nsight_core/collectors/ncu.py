"""The ncu collector's pure parts: build ncu's command line, classify its failures.

Contract:

- This module starts no process; sandbox.py runs the argv built here. Finding ncu and
  reading its version belong to `nsight_core.host.ncu_install`; `find_ncu`, `require_ncu` and
  `ncu_version` are re-exported here for the pipeline and the tools.
- Every measured process runs as ``ncu <flags> python -m nsight_core.contestant ...``
  (launch mode), so ncu 2025.x works and the caller's CUDA state never matters; the judge
  runs outside ncu, so its checking kernels never enter the report.
- A request job's contestant is profiled whole but for the harness's untimed calls
  (`protocol.NCU_NVTX_EXCLUDE`): extract.py attributes kernels by parsing the range name
  back, and ranges.py finds work outside the timed ranges and ranges nobody issued. Under
  range replay (whose workloads are the included ranges) it keeps the timed calls' ranges
  alone (`protocol.NCU_NVTX_INCLUDE_TIMED`); an `@kernel` job keeps only kernels inside our
  NVTX start/end ranges (`protocol.NCU_NVTX_INCLUDE`).
- `classify_ncu_failure` is the one place that turns ncu's log text into an `ErrorClass`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from nsight_core.collectors.base import NO_GPU, Backend, HostFacts, Records, Wrapped, register
from nsight_core.collectors.extract import extract_records
from nsight_core.collectors.ncu_diagnose import DIAGNOSE_SECTIONS, diagnose_metrics
from nsight_core.collectors.ranges import counted_records
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.host.catalog import validate_metrics
from nsight_core.host.counters import COUNTERS_DENIED, COUNTERS_FIX, COUNTERS_URL
from nsight_core.host.ncu_install import NO_NCU_HINT, find_ncu, ncu_version, require_ncu
from nsight_core.host.profilers import profiler_users
from nsight_core.host.report import BackendStatus
from nsight_core.plan.config import NCU_ENV, EngineConfig
from nsight_core.protocol import (
    NCU_LOG_FILE,
    NCU_NVTX_EXCLUDE,
    NCU_NVTX_INCLUDE,
    NCU_NVTX_INCLUDE_TIMED,
    REPORT_FILE,
    LaunchSpec,
    SampleEvent,
)
from nsight_core.request import CACHE_CONTROLS as REQUEST_CACHE_CONTROLS
from nsight_core.request import CLOCK_CONTROLS as REQUEST_CLOCK_CONTROLS
from nsight_core.request import DEFAULT_METRIC
from nsight_core.results import Failure
from nsight_core.settings import JobSettings

if TYPE_CHECKING:
    from nsight_core.processes.sandbox import SandboxOutcome

__all__ = [
    "CACHE_CONTROLS",
    "CLOCK_CONTROLS",
    "NCU_ENV",
    "PERMISSION_URL",
    "REPLAY_MODES",
    "build_ncu_command",
    "classify_ncu_failure",
    "find_ncu",
    "ncu_version",
    "parse_bad_metrics",
    "require_ncu",
]

CACHE_CONTROLS = REQUEST_CACHE_CONTROLS
CLOCK_CONTROLS = REQUEST_CLOCK_CONTROLS
REPLAY_MODES = ("kernel", "range", "application", "app-range")

NvtxFilter = Literal["ranges", "timed", "all_but_untimed"]
_NVTX_FLAGS: dict[str, tuple[str, str, str]] = {
    "ranges": ("--nvtx", "--nvtx-include", NCU_NVTX_INCLUDE),
    "timed": ("--nvtx", "--nvtx-include", NCU_NVTX_INCLUDE_TIMED),
    "all_but_untimed": ("--nvtx", "--nvtx-exclude", NCU_NVTX_EXCLUDE),
}

PERMISSION_URL = COUNTERS_URL

NO_SECTIONS_DIR = Path(__file__).resolve().parents[1] / "data" / "ncu_no_sections"
"""A section folder with no sections (its README says why): ncu reads its whole section
folder at every start, which a job that names its metrics does not need (docs/backends.md
has the measurement)."""

_BAD_METRIC_RE = re.compile(
    r"Failed to find metric(?:s|\(s\))?:?\s+(?P<names>.+?)\s*$", re.IGNORECASE
)
_ERROR_LINE_RE = re.compile(r"^==ERROR==\s*(.*)$")
# ncu echoes the target's failing exit code; that is the worker's business, not ncu's.
_APP_EXIT_RE = re.compile(r"application returned an error code", re.IGNORECASE)
_NO_KERNELS_RE = re.compile(r"No kernels were profiled", re.IGNORECASE)
_PROFILER_BUSY_RE = re.compile(r"driver resource was unavailable", re.IGNORECASE)
_MAX_LOG_LINES = 12


def _choice(name: str, value: str, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise NsightCoreError(
            ErrorClass.INVALID_REQUEST,
            f"{name} {value!r} is not one of {list(allowed)}",
            f"pass one of {', '.join(allowed)}",
        )
    return value


def build_ncu_command(
    ncu: str,
    *,
    metrics: Sequence[str],
    cache_control: str,
    clock_control: str,
    replay_mode: str,
    report_path: str | Path,
    log_path: str | Path,
    target_argv: Sequence[str],
    sections: Sequence[str] = (),
    nvtx: NvtxFilter = "ranges",
) -> list[str]:
    """The argv that profiles ``target_argv`` under ncu, keeping what ``nvtx`` says: the
    kernels inside our NVTX ranges (``"ranges"``, an `@kernel` job), inside the timed
    calls' ranges (``"timed"``, a request job under range replay), or every kernel but our
    untimed calls' (``"all_but_untimed"``, a request job: work outside the timed ranges is
    then in the report, ranges.py).

    ``--target-processes all`` lets ncu follow a launcher into its child; ``-f`` overwrites a
    report left by an earlier attempt in the same job directory. ncu's own messages go to
    ``log_path``, never to our stdout. ``sections`` (``--section``, for ``diagnose``) add a
    section's metrics and rules to the explicit ``--metrics``; without any, ncu is given an
    empty section folder (`NO_SECTIONS_DIR`): it would otherwise read and load every section
    file and rule it ships at each start, for nothing that is collected.
    """
    names = [m.strip() for m in metrics]
    if not names or any(not m or "," in m for m in names):
        raise NsightCoreError(
            ErrorClass.INVALID_REQUEST,
            f"metrics must be non-empty names without commas, got {list(metrics)!r}",
            "pass metric names such as ['gpu__time_duration.sum']",
        )
    if not target_argv:
        raise NsightCoreError(ErrorClass.INVALID_REQUEST, "no target command to profile")
    return [
        ncu,
        *_NVTX_FLAGS[nvtx],
        "--metrics",
        ",".join(names),
        *(arg for s in sections for arg in ("--section", s)),
        *(() if sections else ("--section-folder", str(NO_SECTIONS_DIR))),
        "--cache-control",
        _choice("cache_control", cache_control, CACHE_CONTROLS),
        "--clock-control",
        _choice("clock_control", clock_control, CLOCK_CONTROLS),
        "--replay-mode",
        _choice("replay_mode", replay_mode, REPLAY_MODES),
        "--target-processes",
        "all",
        "--log-file",
        str(log_path),
        "-f",
        "-o",
        str(report_path),
        *target_argv,
    ]


def _unescape_metric(token: str) -> str:
    """'regex:^foo\\.sum(\\.(sum|avg))?$' -> 'foo.sum'; a plain name is returned as is."""
    token = token.strip().strip("'\"").rstrip(".")
    if token.startswith("regex:"):
        token = token[len("regex:") :].lstrip("^")
        token = token.split("(", 1)[0].rstrip("$")
        token = token.replace("\\.", ".").replace("\\", "")
    return token.rstrip(".")


def parse_bad_metrics(log_text: str, requested: Sequence[str] = ()) -> list[str]:
    """Metric names ncu could not find, as the caller spelled them where they can be matched.

    ncu writes one ``==ERROR== Failed to find metric <name>`` line per bad name; for a name
    without a rollup suffix it prints the regex it tried (``regex:^name\\.(sum|avg|...)$``).
    """
    seen: list[str] = []
    for line in log_text.splitlines():
        m = _BAD_METRIC_RE.search(line)
        if m is None:
            continue
        for token in re.split(r"[,\s]+", m["names"]):
            name = _unescape_metric(token)
            if not name:
                continue
            matches = [r for r in requested if r == name or r.split(".")[0] == name]
            for found in matches or [name]:
                if found not in seen:
                    seen.append(found)
    return seen


def _error_lines(log_text: str) -> list[str]:
    lines = []
    for line in log_text.splitlines():
        m = _ERROR_LINE_RE.match(line.strip())
        if m and m.group(1):
            lines.append(m.group(1))
    return lines


def profiler_busy(log_text: str) -> bool:
    """ncu found its GPU's profiler held by another process (one session at a time)."""
    return _PROFILER_BUSY_RE.search(log_text) is not None


def _tail(lines: Sequence[str]) -> str:
    kept = list(lines)[-_MAX_LOG_LINES:]
    return "; ".join(kept)


def classify_ncu_failure(
    exit_code: int | None,
    log_text: str,
    report_exists: bool,
    *,
    metrics: Sequence[str] = (),
    holders: Sequence[str] = (),
) -> NsightCoreError | None:
    """Map ncu's exit code and log to an error, or None when ncu itself did its job.
    ``holders``: the processes that may hold the GPU's profiler (host/profilers.py), named
    when ncu found it held.

    Order matters: a bad metric or missing permission also leaves no report, and the
    specific cause is what the agent can act on. A non-zero exit with a report and no ncu
    error is the target's own failure, which sandbox.py reports from the worker's exit code.
    """
    bad = parse_bad_metrics(log_text, metrics)
    if bad:
        return NsightCoreError(
            ErrorClass.INVALID_METRIC,
            f"ncu does not know metric(s) {', '.join(bad)}",
            "call validate_metrics for suggestions; names without a rollup suffix "
            "need one (.sum, .avg, .max, .min)",
        )
    if "ERR_NVGPUCTRPERM" in log_text:
        return NsightCoreError(
            ErrorClass.PERMISSION_DENIED,
            "ncu may not read GPU performance counters for this user (ERR_NVGPUCTRPERM)",
            f"{COUNTERS_FIX}. Do not change driver settings from a profiling job",
        )
    errors = [e for e in _error_lines(log_text) if not _APP_EXIT_RE.search(e)]
    if profiler_busy(log_text):
        held = "; ".join(holders) if holders else "none of this host's processes could be named"
        return NsightCoreError(
            ErrorClass.PROFILER_ERROR,
            "the GPU's profiler was held by another process: ncu could not profile "
            f"(the driver: a profiling resource was unavailable). Processes that may hold it "
            f"now (profilers, or programs a profiler was injected into): {held}",
            "wait until that process has ended, or stop it if it is yours (another ncu or "
            "nsys run, or DCGM's profiling module: `dcgmi profile --pause`); nspy-mcp never "
            "keeps a profiled process of its own beside a job that needs ncu and retries "
            "such a job once, so this one was held by something else",
        )
    if not report_exists:
        if _NO_KERNELS_RE.search(log_text):
            why = (
                "no kernel ran that ncu's NVTX filter keeps (inside an NVTX start/end range "
                f"of domain 'nspy', {NCU_NVTX_INCLUDE}; in a request job, outside the "
                f"untimed calls, {NCU_NVTX_EXCLUDE}), so ncu profiled nothing and wrote no "
                "report"
            )
        elif errors:
            why = f"ncu wrote no report: {_tail(errors)}"
        else:
            why = f"ncu wrote no report (exit code {exit_code})"
        return NsightCoreError(
            ErrorClass.PROFILER_ERROR, why, "read the ncu log in the job's artifacts"
        )
    if errors:
        return NsightCoreError(
            ErrorClass.PROFILER_ERROR,
            f"ncu reported errors: {_tail(errors)}",
            "read the ncu log in the job's artifacts",
        )
    return None


class NcuBackend(Backend):
    """Nsight Compute: any metric, per kernel, measured outside the contestant's process."""

    name = "ncu"
    evidence = "external"
    child_timer = "range"
    default_metric = DEFAULT_METRIC
    any_metric = True
    settings_apply = True
    holds_profiler = True
    reads_counters = True

    def preflight(self, settings: JobSettings, config: EngineConfig) -> None:
        super().preflight(settings, config)
        require_ncu(config)
        self.check_metric_names(settings.metrics, config)

    def check_metric_names(self, metrics: Sequence[str], config: EngineConfig) -> None:
        _refuse_invalid_metrics(metrics, config)

    def wrap(
        self, argv: Sequence[str], launch: LaunchSpec, out_dir: Path, config: EngineConfig
    ) -> Wrapped:
        ncu = require_ncu(config)
        report, log = out_dir / REPORT_FILE, out_dir / NCU_LOG_FILE
        # diagnose: ncu also collects the speed-of-light metrics and rules; rows still come
        # from the requested metrics only (read_records), the rest feeds diagnose.py.
        command = build_ncu_command(
            ncu,
            metrics=diagnose_metrics(launch.metrics) if launch.diagnose else launch.metrics,
            sections=DIAGNOSE_SECTIONS if launch.diagnose else (),
            cache_control=launch.cache_control,
            clock_control=launch.clock_control,
            replay_mode=launch.replay_mode,
            report_path=report,
            log_path=log,
            target_argv=argv,
            nvtx=_nvtx_filter(argv, launch.replay_mode),
        )
        return Wrapped(command, None, report, log)

    def tool_version(self, command: Sequence[str]) -> str | None:
        return ncu_version(command[0]) if command else None

    def classify_end(
        self, outcome: SandboxOutcome, wrapped: Wrapped, settings: JobSettings
    ) -> NsightCoreError | None:
        if outcome.error_class in (ErrorClass.CANCELLED, ErrorClass.TIMEOUT):
            return None
        log = wrapped.log_path
        text = log.read_text(errors="replace") if log is not None and log.exists() else ""
        report = wrapped.report_path
        return classify_ncu_failure(
            outcome.exit_code,
            text,
            report is not None and report.exists(),
            metrics=settings.metrics,
            holders=profiler_users() if profiler_busy(text) else (),
        )

    def profiler_was_busy(self, job_dir: Path) -> bool:
        try:
            return profiler_busy((job_dir / NCU_LOG_FILE).read_text(errors="replace"))
        except OSError:
            return False

    def read_records(
        self, wrapped: Wrapped, samples: Sequence[SampleEvent], settings: JobSettings
    ) -> Records:
        return records_from_report(wrapped.report_path, settings.metrics)

    def availability(self, host: HostFacts, fixes: list[str]) -> BackendStatus:
        """ncu runs with a GPU, a recent ncu, the report reader and counter access; the
        reason a job would be refused, in the pipeline's words."""
        used = next((n for n in host.ncu if n.used), None)
        why_none = (host.found.problem if host.found else None) or "no ncu found"
        if not host.gpus:
            missing = "" if used else f"; {why_none}"
            return BackendStatus(name="ncu", available=False, reason=NO_GPU + missing)
        if used is None:
            fixes.append(f"{why_none}: {host.found.hint if host.found else NO_NCU_HINT}.")
            return BackendStatus(name="ncu", available=False, reason=why_none)
        if not used.launch_mode_ok:
            fixes.append(
                f"The first ncu found ({used.path}) is too old or unreadable; put Nsight Compute "
                "2022.4+ first on PATH or set NSPY_NCU."
            )
            return BackendStatus(
                name="ncu",
                available=False,
                reason=f"ncu {used.version or '?'} at {used.path} is older than 2022.4",
            )
        if not host.ncu_report.installed:
            fixes.append("Install the report reader: pip install 'ncu-report>=2025.3'.")
            return BackendStatus(name="ncu", available=False, reason="ncu-report is not installed")
        if host.counters.denied():
            fixes.append(f"{COUNTERS_DENIED}. {COUNTERS_FIX}.")
            return BackendStatus(name="ncu", available=False, reason=COUNTERS_DENIED)
        why = f"ncu {used.version} at {used.path}"
        if host.counters.deep_test == "passed":
            why += "; a one-kernel test read counters"
        elif host.counters.rm_profiling_admin_only is None:
            why += "; counter permission not checked (params unreadable; probe with deep=True)"
        if host.ncu_report.compatible is False:
            why += f"; warning: {host.ncu_report.note}"
            fixes.append(host.ncu_report.note)
        return BackendStatus(name="ncu", available=True, reason=why)


def _nvtx_filter(argv: Sequence[str], replay_mode: str) -> NvtxFilter:
    """A request job's contestant (``python -m nsight_core.contestant DIR TIMER``), whose
    calls a judge issues, is profiled whole but for its untimed calls; under range replay
    (a workload per included range) its timed ranges alone. The `@kernel` mode
    (``... --function JOB_DIR``), where the user's own function annotates itself, keeps
    only its annotated regions."""
    if "--function" in argv:
        return "ranges"
    return "all_but_untimed" if replay_mode in ("kernel", "application") else "timed"


def records_from_report(report_path: Path | None, metrics: Sequence[str]) -> Records:
    """Records of the ncu report, the metrics it really holds, the GPU name, failures, and
    what the kernels outside the harness's ranges say (`ranges.classify`).

    ncu 2025.3 accepts an unknown metric name silently (exit 0, no log error, the report
    simply lacks it), so a requested metric that no action carries is
    reported here as invalid_metric instead of turning into a column of nulls. With the
    judge's issued calls beside the report (a request job), only kernels of issued timed
    ranges, in the order issued, count; the rest become the rows' reasons.
    """
    if report_path is None or not report_path.exists():
        return Records([], list(metrics))
    try:
        report = extract_records(report_path, metrics)
    except NsightCoreError as err:
        failure = Failure(
            ErrorClass=err.error_class, Error=err.message, Hint=err.hint, Phase="extract"
        )
        return Records([], list(metrics), None, [failure])
    records, found = counted_records(report, report_path)
    suspects = found.suspects() if found is not None else []
    present = [m for m in metrics if any(r.metric == m and r.value is not None for r in records)]
    failures = [
        Failure(
            ErrorClass=ErrorClass.INVALID_METRIC,
            Error=f"ncu recorded no value of {m!r} for any kernel: not a metric of this chip "
            "and ncu version (ncu ignores unknown names without an error)",
            Hint="call validate_metrics for the valid names",
            Phase="extract",
        )
        for m in metrics
        if m not in present and records
    ]
    kept = present if records else list(metrics)
    return Records(
        [r for r in records if r.metric in kept],
        kept,
        report.device.display_name,
        failures,
        suspects,
    )


def _refuse_invalid_metrics(metrics: Sequence[str], config: EngineConfig) -> None:
    report = validate_metrics(list(metrics), config=config)
    # "unverified" (no catalog for this chip, or a regex) is left to ncu and to the
    # report check in read_records; only names known to be wrong stop the job here.
    bad = [m for m in report.metrics if m.status in ("unknown", "needs_suffix")]
    if bad:
        parts = []
        for m in bad:
            names = m.suggestions or m.valid_names
            hint = f" (did you mean {', '.join(names[:3])}?)" if names else ""
            parts.append(f"{m.name}: {m.status}{hint}")
        raise NsightCoreError(
            ErrorClass.INVALID_METRIC,
            "invalid metric name(s): " + "; ".join(parts),
            "call validate_metrics for details; fix the names before profiling",
        )


NCU = register(NcuBackend())
