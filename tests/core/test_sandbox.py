"""The sandbox with real subprocesses: how each kind of end maps to one ErrorClass."""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from nsight_core.errors import WORKER_EXIT_CLASS, ErrorClass, JobExit
from nsight_core.processes.sandbox import (
    SandboxLimits,
    SandboxOutcome,
    build_env,
    run_command,
    run_sandboxed,
)

PY = sys.executable
QUICK = SandboxLimits(wall_s=20.0)
"""For children that end by themselves; the limit only bounds a broken test."""


def run_py(code: str, cwd: Path, limits: SandboxLimits = QUICK, **kw: object) -> SandboxOutcome:
    return run_sandboxed([PY, "-c", code], cwd=cwd, limits=limits, **kw)  # type: ignore[arg-type]


def write_pid(expr: str = "os.getpid()") -> str:
    """Child code that publishes a pid atomically (rename), so a poller never reads half a file."""
    return f"import os\nopen('pid.tmp', 'w').write(str({expr}))\nos.rename('pid.tmp', 'pid')\n"


def alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (killed, not yet reaped by init) counts as dead."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_clean_exit_has_no_error_class_and_keeps_stdout(tmp_path: Path) -> None:
    out = run_py("print('hello')", tmp_path)
    assert out.error_class is None
    assert out.exit_code == 0
    assert out.stdout.text() == "hello\n"


def test_uncaught_exception_in_a_plain_process_is_crashed_with_the_stderr_tail(
    tmp_path: Path,
) -> None:
    out = run_py("raise ValueError('boom')", tmp_path)
    assert out.exit_code == 1
    assert out.error_class == ErrorClass.CRASHED
    assert "ValueError" in out.message


def test_os_exit_with_an_unknown_code_is_crashed(tmp_path: Path) -> None:
    out = run_py("import os; os._exit(3)", tmp_path)
    assert (out.exit_code, out.signal_name) == (3, None)
    assert out.error_class == ErrorClass.CRASHED


def test_segfault_is_crashed_with_the_signal_name(tmp_path: Path) -> None:
    out = run_py("import ctypes; ctypes.string_at(0)", tmp_path)
    assert out.exit_code is None
    assert out.signal_name == "SIGSEGV"
    assert out.error_class == ErrorClass.CRASHED


@pytest.mark.parametrize("code", list(JobExit))
def test_worker_exit_codes_map_to_their_classes(tmp_path: Path, code: JobExit) -> None:
    out = run_py(f"import sys; sys.exit({int(code)})", tmp_path)
    assert out.exit_code == int(code)
    assert out.error_class == WORKER_EXIT_CLASS[code]


def test_an_explicit_exit_table_replaces_the_worker_codes(tmp_path: Path) -> None:
    table = {5: ErrorClass.PROFILER_ERROR}
    assert run_py("raise SystemExit(5)", tmp_path, exit_classes=table).error_class == (
        ErrorClass.PROFILER_ERROR
    )
    assert run_py("raise SystemExit(71)", tmp_path, exit_classes=table).error_class == (
        ErrorClass.CRASHED
    )


def test_infinite_loop_times_out_within_limit_plus_grace_with_last_lines(tmp_path: Path) -> None:
    limits = SandboxLimits(wall_s=1.0, kill_grace_s=1.0)
    code = "import time\nn = 0\nwhile True:\n    n += 1\n    print('tick', n, flush=True)\n    time.sleep(0.05)"
    out = run_py(code, tmp_path, limits)
    assert out.timed_out
    assert out.error_class == ErrorClass.TIMEOUT
    assert out.wall_s < limits.wall_s + limits.kill_grace_s + 1.0
    assert "tick" in out.message


def test_group_that_ignores_sigterm_gets_sigkill_after_the_grace(tmp_path: Path) -> None:
    limits = SandboxLimits(wall_s=1.5, kill_grace_s=1.0)
    code = (
        "import os, signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = 'import signal, time\\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
        "while True: time.sleep(1)'\n"
        "p = subprocess.Popen([sys.executable, '-c', child])\n"
        "open('pids.json', 'w').write('[%d, %d]' % (os.getpid(), p.pid))\n"
        "while True: time.sleep(1)\n"
    )
    out = run_py(code, tmp_path, limits)
    assert out.error_class == ErrorClass.TIMEOUT
    assert out.wall_s < limits.wall_s + limits.kill_grace_s + 1.0
    pids = json.loads((tmp_path / "pids.json").read_text())
    assert [alive(pid) for pid in pids] == [False, False]


def test_grandchild_that_outlives_a_clean_leader_is_killed(tmp_path: Path) -> None:
    code = (
        "import subprocess, sys\n"
        "child = 'import signal, time\\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
        "while True: time.sleep(1)'\n"
        "p = subprocess.Popen([sys.executable, '-c', child])\n"
    ) + write_pid("p.pid")
    out = run_py(code, tmp_path)
    assert out.error_class is None
    assert not alive(int((tmp_path / "pid").read_text()))


def test_ten_megabytes_of_output_are_capped_and_counted_in_bounded_memory(
    tmp_path: Path,
) -> None:
    limits = SandboxLimits(wall_s=20.0, head_bytes=4096, tail_bytes=4096)
    code = "import sys\nfor i in range(100_000):\n    sys.stdout.write('%099d\\n' % i)"
    tracemalloc.start()
    try:
        out = run_py(code, tmp_path, limits, output_dir=tmp_path / "job")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out.error_class is None
    assert out.stdout.total_bytes == 10_000_000
    assert (len(out.stdout.head), len(out.stdout.tail)) == (4096, 4096)
    assert out.stdout.omitted_bytes == 10_000_000 - 8192
    assert out.stdout.tail.endswith(b"%099d\n" % 99_999)
    assert peak < 2_000_000
    saved = out.output_files["stdout"]
    assert saved.stat().st_size < 8192 + 200
    assert saved.read_bytes().startswith(out.stdout.head)


def test_supervising_a_quiet_child_without_a_poll_callback_does_not_spin(tmp_path: Path) -> None:
    """The judge supervises its contestant without a `poll` callback. Its loop once spun on
    select(0) and /proc scans for the whole job (1.6 s of CPU for a 1 s child on CI), which
    starved the child it watched; now it wakes once per poll interval."""
    t0 = time.thread_time()
    out = run_py("import time; time.sleep(1.5)", tmp_path, SandboxLimits(wall_s=30))
    used = time.thread_time() - t0
    assert out.exit_code == 0
    assert used < 0.5, f"the supervising thread used {used:.2f} s of CPU for a sleeping child"


def test_cancel_event_kills_the_group_and_reports_cancelled(tmp_path: Path) -> None:
    cancel = threading.Event()
    started = tmp_path / "pid"
    code = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time\\nwhile True: time.sleep(1)'])\n"
        + write_pid("p.pid")
        + "while True: time.sleep(1)\n"
    )

    def poll() -> None:
        if started.exists():
            cancel.set()

    out = run_py(code, tmp_path, SandboxLimits(wall_s=30.0), cancel=cancel, poll=poll)
    assert out.cancelled
    assert out.error_class == ErrorClass.CANCELLED
    assert not alive(int(started.read_text()))


def test_environment_is_an_allowlist_without_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECRET_TOKEN", "leak")
    monkeypatch.setenv("AWS_REGION", "leak")
    monkeypatch.setenv("CUDA_API_KEY", "leak")
    monkeypatch.setenv("RANDOM_THING", "leak")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    out = run_py(code, tmp_path, env={"NSPY_EXTRA": "1"}, keep_tmp=True)
    env = json.loads(out.stdout.text())
    assert out.tmp_dir is not None
    assert not {"SECRET_TOKEN", "AWS_REGION", "CUDA_API_KEY", "RANDOM_THING"} & set(env)
    assert env["CUDA_VISIBLE_DEVICES"] == "0"
    assert env["NSPY_EXTRA"] == "1"
    assert env["HOME"] == env["TMPDIR"] == str(out.tmp_dir)
    assert out.tmp_dir.is_dir()
    shutil.rmtree(out.tmp_dir)


def test_private_temp_dir_is_removed_after_the_job(tmp_path: Path) -> None:
    out = run_py("import os; open(os.path.join(os.environ['HOME'], 'x'), 'w').write('1')", tmp_path)
    assert out.error_class is None
    assert out.tmp_dir is not None
    assert not out.tmp_dir.exists()


def test_build_env_drops_deny_patterns_case_insensitively() -> None:
    base = {"PATH": "/bin", "TRITON_cache_token": "x", "NVIDIA_VISIBLE_DEVICES": "all"}
    env = build_env(base=base, home=Path("/nowhere"))
    assert "TRITON_cache_token" not in env
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"


def test_stdin_is_closed(tmp_path: Path) -> None:
    out = run_py("import sys; print(repr(sys.stdin.read()))", tmp_path)
    assert out.stdout.text().strip() == "''"


def test_core_dumps_are_off_and_file_size_is_capped(tmp_path: Path) -> None:
    limits = SandboxLimits(wall_s=20.0, file_size_bytes=1_000_000)
    code = (
        "import errno, resource\n"
        "print(resource.getrlimit(resource.RLIMIT_CORE)[0])\n"
        "try:\n"
        "    open('big', 'wb').write(b'x' * 2_000_000)\n"
        "except OSError as e:\n"
        "    print(errno.errorcode[e.errno])\n"
    )
    out = run_py(code, tmp_path, limits)
    assert out.stdout.text().split() == ["0", "EFBIG"]
    assert (tmp_path / "big").stat().st_size <= 1_000_000


def test_missing_program_is_crashed_without_raising(tmp_path: Path) -> None:
    out = run_sandboxed(["/nonexistent/ncu"], cwd=tmp_path, limits=QUICK)
    assert out.error_class == ErrorClass.CRASHED
    assert out.exit_code is None


def test_an_exception_from_poll_still_kills_the_group(tmp_path: Path) -> None:
    code = write_pid() + "import time\nwhile True: time.sleep(1)\n"

    class Stop(Exception):
        pass

    def poll() -> None:
        if (tmp_path / "pid").exists():
            raise Stop

    with pytest.raises(Stop):
        run_py(code, tmp_path, SandboxLimits(wall_s=30.0), poll=poll)
    assert not alive(int((tmp_path / "pid").read_text()))


def test_passed_descriptor_reaches_the_child_and_others_stay_closed(tmp_path: Path) -> None:
    read_fd, write_fd = os.pipe()
    other_r, other_w = os.pipe()
    try:
        code = (
            "import os, sys\n"
            f"os.write({write_fd}, b'through the pipe')\n"
            f"try:\n    os.fstat({other_w})\nexcept OSError:\n    print('closed')\n"
        )
        out = run_py(code, tmp_path, pass_fds=(write_fd,))
        os.close(write_fd)
        write_fd = -1
        assert out.error_class is None, out.message
        assert os.read(read_fd, 100) == b"through the pipe"
        assert out.stdout.text().strip() == "closed"
    finally:
        for fd in (read_fd, write_fd, other_r, other_w):
            if fd >= 0:
                os.close(fd)


def test_short_command_keeps_megabytes_of_output_whole(tmp_path: Path) -> None:
    out = run_command([PY, "-c", "print('x' * 3_000_000)"], 20.0)
    assert out.exit_code == 0 and out.error_class is None
    assert out.stdout.omitted_bytes == 0 and len(out.stdout.text()) == 3_000_001


def test_short_command_past_its_limit_is_killed_with_its_group(tmp_path: Path) -> None:
    code = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time\\nwhile True: time.sleep(1)'])\n"
        + write_pid("p.pid")
        + "while True: time.sleep(1)\n"
    )
    out = run_command([PY, "-c", code], 2.0, cwd=tmp_path)
    assert out.timed_out and out.exit_code is None and "killed" in out.message
    assert out.error_class is ErrorClass.TIMEOUT
    assert out.wall_s < 2.0 + 1.0 + 1.5
    assert not alive(int((tmp_path / "pid").read_text()))


def test_short_command_that_fails_or_cannot_start_says_why(tmp_path: Path) -> None:
    failed = run_command([PY, "-c", "import sys; sys.exit(3)"], 20.0)
    assert failed.exit_code == 3 and failed.error_class is ErrorClass.CRASHED
    missing = run_command([str(tmp_path / "nope")], 5.0)
    assert missing.exit_code is None and not missing.timed_out
    assert "could not start" in missing.message
