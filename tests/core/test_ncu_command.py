"""The ncu command line we build, and how ncu's log text maps to an ErrorClass.

Log texts are ncu's own message formats (the unknown-metric line quotes a real log with the
regex ncu prints for names without a suffix). Once tests/data/ncu/ holds the recorded logs,
the same classification is also checked on them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nsight_core.collectors.ncu import (
    NO_SECTIONS_DIR,
    PERMISSION_URL,
    build_ncu_command,
    classify_ncu_failure,
    parse_bad_metrics,
)
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.protocol import NCU_NVTX_INCLUDE

DATA = Path(__file__).resolve().parents[1] / "data" / "ncu"


def _command(**overrides: object) -> list[str]:
    kwargs: dict[str, object] = {
        "metrics": ["gpu__time_duration.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed"],
        "cache_control": "all",
        "clock_control": "none",
        "replay_mode": "kernel",
        "report_path": "/job/report.ncu-rep",
        "log_path": "/job/ncu.log",
        "target_argv": ["/venv/bin/python", "-m", "nsight_core.worker", "/job"],
    }
    kwargs.update(overrides)
    return build_ncu_command("/opt/ncu/ncu", **kwargs)  # type: ignore[arg-type]


def _flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_command_runs_the_target_under_ncu_with_our_nvtx_filter() -> None:
    cmd = _command()
    assert cmd[0] == "/opt/ncu/ncu"
    assert "--nvtx" in cmd
    assert _flag(cmd, "--nvtx-include") == NCU_NVTX_INCLUDE == "regex:nspy@.+"
    assert _flag(cmd, "--metrics") == (
        "gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed"
    )
    assert _flag(cmd, "--cache-control") == "all"
    assert _flag(cmd, "--clock-control") == "none"
    assert _flag(cmd, "--replay-mode") == "kernel"
    assert _flag(cmd, "--target-processes") == "all"
    assert _flag(cmd, "--log-file") == "/job/ncu.log"
    assert _flag(cmd, "-o") == "/job/report.ncu-rep"
    assert "-f" in cmd
    assert cmd[-4:] == ["/venv/bin/python", "-m", "nsight_core.worker", "/job"]
    assert cmd.index("-o") < len(cmd) - 4  # every ncu flag comes before the target


def test_a_command_without_sections_points_ncu_at_a_folder_with_none() -> None:
    """ncu reads its whole section folder (52 files and rules in 2025.3) at every start; a
    job that names its metrics gets a folder where ncu finds nothing to read, one shipped in
    the package (so a plain install has it), and a diagnose job the default folder."""
    cmd = _command()
    folder = Path(_flag(cmd, "--section-folder"))
    assert folder == NO_SECTIONS_DIR and folder.is_dir()
    assert not [f for f in folder.iterdir() if f.suffix in (".section", ".py")]
    assert cmd.index("--section-folder") < cmd.index("-o")
    with_sections = _command(sections=["SpeedOfLight"])
    assert "--section-folder" not in with_sections
    assert _flag(with_sections, "--section") == "SpeedOfLight"


def test_command_never_attaches_or_changes_clocks_unasked() -> None:
    cmd = _command()
    assert "--mode" not in cmd
    assert _command(clock_control="base")[cmd.index("--clock-control") + 1] == "base"


@pytest.mark.parametrize(
    "bad",
    [
        {"cache_control": "some"},
        {"clock_control": "boost"},
        {"replay_mode": "kernels"},
        {"metrics": []},
        {"metrics": ["a,b"]},
        {"target_argv": []},
    ],
)
def test_command_rejects_values_ncu_would_reject(bad: dict[str, object]) -> None:
    with pytest.raises(NsightCoreError) as err:
        _command(**bad)
    assert err.value.error_class is ErrorClass.INVALID_REQUEST


# --- classification -------------------------------------------------------------------------

UNKNOWN_REGEX_LOG = """\
==PROF== Connected to process 20101 (/usr/bin/python3.10)
==ERROR== Failed to find metric regex:^flop_count_sp\\.(sum|min|max|avg|pct|ratio|max_rate)$
==PROF== Disconnected from process 20101
"""

UNKNOWN_TWO_LOG = """\
==PROF== Connected to process 4242 (/venv/bin/python3.12)
==ERROR== Failed to find metric nspy__no_such_metric.sum
==ERROR== Failed to find metric sm__bogus_pct
==PROF== Disconnected from process 4242
"""

PERMISSION_LOG = """\
==PROF== Connected to process 777 (/venv/bin/python3.12)
==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance \
Counters on the target device 0. For instructions on enabling permissions and to get more \
information see https://developer.nvidia.com/ERR_NVGPUCTRPERM
==PROF== Disconnected from process 777
"""

NO_KERNELS_LOG = """\
==PROF== Connected to process 555 (/venv/bin/python3.12)
==PROF== Disconnected from process 555
==WARNING== No kernels were profiled.
"""

APP_FAILED_LOG = """\
==PROF== Connected to process 556 (/venv/bin/python3.12)
==PROF== Profiling "add_kernel" - 0: 0%....50%....100% - 1 pass
==PROF== Disconnected from process 556
==ERROR== The application returned an error code (73).
==PROF== Report: /job/report.ncu-rep
"""


def test_unknown_metric_names_exactly_the_bad_metric() -> None:
    err = classify_ncu_failure(
        1, UNKNOWN_REGEX_LOG, False, metrics=["gpu__time_duration.sum", "flop_count_sp"]
    )
    assert err is not None and err.error_class is ErrorClass.INVALID_METRIC
    assert parse_bad_metrics(UNKNOWN_REGEX_LOG, ["gpu__time_duration.sum", "flop_count_sp"]) == [
        "flop_count_sp"
    ]


def test_every_unknown_metric_is_named_and_good_ones_are_not() -> None:
    requested = ["gpu__time_duration.sum", "nspy__no_such_metric.sum", "sm__bogus_pct"]
    err = classify_ncu_failure(1, UNKNOWN_TWO_LOG, False, metrics=requested)
    assert err is not None and err.error_class is ErrorClass.INVALID_METRIC
    assert parse_bad_metrics(UNKNOWN_TWO_LOG, requested) == requested[1:]


def test_missing_counter_permission_is_permission_denied_with_safe_remediation() -> None:
    err = classify_ncu_failure(1, PERMISSION_LOG, False)
    assert err is not None and err.error_class is ErrorClass.PERMISSION_DENIED
    assert PERMISSION_URL in err.hint and "events" in err.hint
    assert "modprobe" not in str(err) and "sudo" not in str(err)


def test_no_profiled_kernels_is_a_profiler_error_that_names_the_filter() -> None:
    err = classify_ncu_failure(0, NO_KERNELS_LOG, False)
    assert err is not None and err.error_class is ErrorClass.PROFILER_ERROR
    assert NCU_NVTX_INCLUDE in err.message


def test_missing_report_without_a_known_cause_carries_the_ncu_error_lines() -> None:
    log = "==ERROR== An error was reported by the driver\n==ERROR== Unknown error (code 999)\n"
    err = classify_ncu_failure(1, log, False)
    assert err is not None and err.error_class is ErrorClass.PROFILER_ERROR
    assert "Unknown error (code 999)" in err.message


def test_target_failure_with_a_report_is_left_to_the_sandbox() -> None:
    assert classify_ncu_failure(73, APP_FAILED_LOG, True) is None


def test_clean_run_is_not_a_failure() -> None:
    log = "==PROF== Connected to process 1\n==PROF== Report: /job/report.ncu-rep\n"
    assert classify_ncu_failure(0, log, True) is None


def _manifest() -> dict[str, object]:
    path = DATA / "manifest.json"
    if not path.is_file():
        pytest.skip(f"recorded fixtures not present yet: {DATA} (see tests/data/README.md)")
    data: dict[str, object] = json.loads(path.read_text())
    return data


def test_ncu_2025_ignores_an_unknown_metric_so_only_the_report_can_tell() -> None:
    # Recorded on the H200 (ncu 2025.3.1): an unknown metric name gives exit 0, no log
    # error and a report without it. Extraction must therefore check every requested
    # metric (test_extract.py); the log classifier has nothing to find.
    entry = _manifest()["cases"]["bad_metric"]  # type: ignore[index]
    log = (DATA / entry["log"]).read_text(errors="replace")
    assert entry["exit_code"] == 0 and "==ERROR==" not in log
    assert classify_ncu_failure(0, log, True, metrics=entry["metrics"]) is None


@pytest.mark.parametrize(
    ("case", "expected"),
    [("no_kernels", ErrorClass.PROFILER_ERROR)],
)
def test_recorded_ncu_logs_classify_as_expected(case: str, expected: ErrorClass) -> None:
    cases = _manifest()["cases"]
    assert isinstance(cases, dict)
    entry = cases[case]
    log = (DATA / entry["log"]).read_text(errors="replace")
    report_exists = bool(entry.get("report")) and (DATA / str(entry["report"])).is_file()
    err = classify_ncu_failure(entry["exit_code"], log, report_exists, metrics=entry["metrics"])
    assert err is not None and err.error_class is expected
    if expected is ErrorClass.INVALID_METRIC:
        assert parse_bad_metrics(log, entry["metrics"]) == ["nspy__no_such_metric.sum"]
