"""Issue 11, with real processes: children die with their parent, no descendant outlives its
job (setsid or not), resident memory is limited, and a candidate cannot read the server's
environment nor, under Landlock, the store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from nsight_core.errors import ErrorClass
from nsight_core.plan.config import EngineConfig
from nsight_core.processes.sandbox import (
    JOB_MARKER_ENV,
    MEMORY_ENV,
    SandboxLimits,
    default_fs_access,
    default_memory_limit,
    landlock_abi,
    parse_memory,
    physical_memory_bytes,
    run_sandboxed,
    sandbox_mechanisms,
)

PY = sys.executable
ROOT = Path(__file__).resolve().parents[2]
QUICK = SandboxLimits(wall_s=30.0)
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl, /proc")


def alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie counts as dead."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_for(path: Path, timeout: float = 20.0) -> str:
    """The content of ``path`` once it exists (children publish it with an atomic rename)."""
    end = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.02)
    return path.read_text()


def wait_dead(pids: list[int], timeout: float = 5.0) -> list[bool]:
    end = time.monotonic() + timeout
    while any(alive(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.05)
    return [alive(p) for p in pids]


def publish(name: str, expr: str) -> str:
    return (
        f"open({name!r} + '.tmp', 'w').write(str({expr})); os.rename({name!r} + '.tmp', {name!r})\n"
    )


# A candidate that escapes: double fork, the grandchild calls setsid and ignores SIGTERM.
ESCAPE = (
    "import os, signal, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "        " + publish("escaped", "os.getpid()") + "        time.sleep(120)\n"
    "    os._exit(0)\n"
    "os.wait()\n"
    "while not os.path.exists('escaped'):\n"
    "    time.sleep(0.01)\n"
)


# --------------------------------------------------------------------------------------
# 1. A child dies with its parent
# --------------------------------------------------------------------------------------

SERVER = textwrap.dedent(
    """
    import sys, threading
    from pathlib import Path
    from nsight_core.processes.sandbox import SandboxLimits, run_sandboxed
    code, cwd = sys.argv[1], Path(sys.argv[2])
    # Like the server: the job runs from a worker thread.
    t = threading.Thread(target=run_sandboxed, args=([sys.executable, '-c', code],),
                         kwargs={'cwd': cwd, 'limits': SandboxLimits(wall_s=60.0)})
    t.start()
    t.join()
    """
)


def start_server(code: str, cwd: Path) -> subprocess.Popen[bytes]:
    # The tests kill this server with SIGKILL, so it cannot remove its job's temporary
    # directory: that goes to a TMPDIR of the test's own.
    tmp = cwd / "server-tmp"
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp)}
    return subprocess.Popen([PY, "-c", SERVER, code, str(cwd)], env=env, cwd=cwd)


@linux_only
def test_killed_server_takes_its_job_with_it_through_pdeathsig(tmp_path: Path) -> None:
    # The job is a plain process that calls nothing: PR_SET_PDEATHSIG alone kills it.
    code = "import os, time\n" + publish("leader", "os.getpid()") + "time.sleep(120)\n"
    server = start_server(code, tmp_path)
    try:
        leader = int(wait_for(tmp_path / "leader"))
        assert alive(leader)
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        assert wait_dead([leader]) == [False]
    finally:
        server.kill()
        server.wait()


@linux_only
def test_watchdog_kills_the_whole_group_when_only_the_pipe_says_the_parent_died(
    tmp_path: Path,
) -> None:
    # The job's leader calls watch_parent_pipe; its child (same group) does nothing at all.
    # The server is SIGKILLed: the pipe's end-of-file reaches the leader's watchdog, which
    # kills the group, so the plain grandchild dies although no pdeathsig was set for it.
    code = (
        "import os, subprocess, sys, time\n"
        "from nsight_core.processes.sandbox import watch_parent_pipe\n"
        "assert watch_parent_pipe()\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        + publish("child", "p.pid")
        + publish("leader", "os.getpid()")
        + "time.sleep(120)\n"
    )
    server = start_server(code, tmp_path)
    try:
        leader = int(wait_for(tmp_path / "leader"))
        grandchild = int(wait_for(tmp_path / "child"))
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        assert wait_dead([leader, grandchild]) == [False, False]
    finally:
        server.kill()
        server.wait()


def test_watch_parent_pipe_outside_a_sandbox_says_so() -> None:
    code = "from nsight_core.processes.sandbox import watch_parent_pipe; print(watch_parent_pipe())"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NSPY_SANDBOX")}
    out = subprocess.run(
        [PY, "-c", code], env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, timeout=60
    )
    assert out.stdout.strip() == b"False"


# --------------------------------------------------------------------------------------
# 2. No descendant outlives its job
# --------------------------------------------------------------------------------------


@linux_only
def test_setsid_double_fork_grandchild_is_killed_when_the_leader_exits_cleanly(
    tmp_path: Path,
) -> None:
    out = run_sandboxed([PY, "-c", ESCAPE], cwd=tmp_path, limits=QUICK)
    assert out.error_class is None, out.message
    escaped = int((tmp_path / "escaped").read_text())
    assert wait_dead([escaped], 2.0) == [False]
    assert out.strays_killed >= 1


@linux_only
@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no pidfd_open")
def test_the_leaders_exit_ends_the_wait_without_waiting_for_the_next_poll(
    tmp_path: Path,
) -> None:
    """The leader closes its pipes first and exits later (as a process tearing down a CUDA
    context does): its exit wakes the supervisor, not the next poll, here 20 s away."""
    code = "import os, time; os.close(1); os.close(2); time.sleep(0.3)"
    slow_polls = SandboxLimits(wall_s=60.0, poll_interval_s=20.0)
    t0 = time.monotonic()
    out = run_sandboxed([PY, "-c", code], cwd=tmp_path, limits=slow_polls)
    assert out.error_class is None and out.exit_code == 0, out.message
    assert time.monotonic() - t0 < 10.0


@linux_only
def test_setsid_grandchild_that_dropped_the_job_id_is_found_through_the_subreaper(
    tmp_path: Path,
) -> None:
    # The grandchild execs with an empty environment (no job id) and the leader is still
    # running when the job is cancelled: as a subreaper the leader inherited the orphan,
    # so parent links still lead to it.
    code = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        os.execve(sys.executable, [sys.executable, '-c', "
        "'import os, time\\n"
        + publish("escaped", "os.getpid()").replace("\n", "\\n").replace("'", '"')
        + "time.sleep(120)'], {})\n"
        "    os._exit(0)\n"
        "os.wait()\n"
        "while not os.path.exists('escaped'):\n"
        "    time.sleep(0.01)\n"
        "print(os.getppid())\n"
        "time.sleep(120)\n"
    )
    import threading

    cancel = threading.Event()
    environ: list[bytes] = []

    def poll() -> None:
        if (tmp_path / "escaped").exists():
            escaped = int((tmp_path / "escaped").read_text())
            environ.append(Path(f"/proc/{escaped}/environ").read_bytes())
            cancel.set()

    out = run_sandboxed([PY, "-c", code], cwd=tmp_path, limits=QUICK, cancel=cancel, poll=poll)
    assert out.error_class is ErrorClass.CANCELLED
    assert environ and JOB_MARKER_ENV.encode() not in environ[0]
    assert wait_dead([int((tmp_path / "escaped").read_text())], 2.0) == [False]
    assert out.strays_killed == 1


@linux_only
def test_nested_sandbox_escapee_dies_with_the_outer_job(tmp_path: Path) -> None:
    # A judge-like leader runs the escaping candidate in its own sandbox and exits at once
    # when that returns; the inner job already killed it, and the outer one would too.
    inner = (
        "import sys\nfrom pathlib import Path\n"
        "from nsight_core.processes.sandbox import SandboxLimits, run_sandboxed\n"
        f"out = run_sandboxed([sys.executable, '-c', {ESCAPE!r}], cwd=Path('.'), "
        "limits=SandboxLimits(wall_s=30.0))\n"
        "print(out.strays_killed, out.error_class)\n"
    )
    out = run_sandboxed(
        [PY, "-c", inner], cwd=tmp_path, limits=QUICK, env={"PYTHONPATH": str(ROOT)}
    )
    assert out.error_class is None, out.message
    assert out.stdout.text().split() == ["1", "None"]
    assert wait_dead([int((tmp_path / "escaped").read_text())], 2.0) == [False]


# --------------------------------------------------------------------------------------
# 3. Resident memory
# --------------------------------------------------------------------------------------


def test_job_past_its_memory_limit_is_out_of_memory_with_the_peak(tmp_path: Path) -> None:
    # 50 MiB per step in two processes of the group; the limit is 200 MiB in total.
    code = (
        "import subprocess, sys, time\n"
        "grow = 'import time\\nb = []\\nwhile True:\\n    b.append(bytearray(50 << 20))\\n"
        "    time.sleep(0.05)'\n"
        "p = subprocess.Popen([sys.executable, '-c', grow])\n"
        "exec(grow)\n"
    )
    limits = SandboxLimits(wall_s=30.0, memory_bytes=200 << 20)
    out = run_sandboxed([PY, "-c", code], cwd=tmp_path, limits=limits)
    assert out.error_class is ErrorClass.OUT_OF_MEMORY
    assert out.out_of_memory and not out.timed_out
    assert out.peak_rss_bytes > 200 << 20
    assert str(out.peak_rss_bytes) in out.message and "200.0 MiB" in out.message
    assert out.wall_s < 20
    assert MEMORY_ENV in out.hint


def test_job_under_its_memory_limit_reports_its_peak(tmp_path: Path) -> None:
    code = "b = bytearray(64 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nimport time; time.sleep(0.5)"
    out = run_sandboxed([PY, "-c", code], cwd=tmp_path, limits=SandboxLimits(wall_s=30.0))
    assert out.error_class is None, out.message
    assert 64 << 20 < out.peak_rss_bytes < out.memory_limit_bytes
    assert out.memory_limit_bytes == default_memory_limit()


def test_memory_limit_default_and_configured_setting() -> None:
    assert default_memory_limit() == physical_memory_bytes() // 2
    setting = EngineConfig.from_env({MEMORY_ENV: "3G"}).job_memory
    assert default_memory_limit(setting) == 3 << 30
    assert sandbox_mechanisms(setting).memory_limit_source == f"{MEMORY_ENV}=3G"
    assert parse_memory("512MiB") == 512 << 20
    assert parse_memory("25%", ram=1000) == 250
    assert parse_memory("off") == 0 == parse_memory("0")
    with pytest.raises(Exception, match="NSPY_MCP_JOB_MEMORY='lots' is not a memory size"):
        default_memory_limit("lots")
    assert "is not a memory size" in sandbox_mechanisms("lots").memory_limit_source


# --------------------------------------------------------------------------------------
# 4. Isolation: the server's environment, and the store under Landlock
# --------------------------------------------------------------------------------------

CHAIN_SERVER = textwrap.dedent(
    """
    import ctypes, json, os, sys
    from pathlib import Path
    from nsight_core.processes.sandbox import SandboxLimits, protect_this_process, run_sandboxed
    if os.geteuid() == 0:
        # Root reads any /proc file through its capabilities. Drop them all, for this process
        # and everything it execs (bounding set), so the chain is what it is on a real host:
        # processes of one unprivileged uid.
        libc = ctypes.CDLL(None)
        for cap in range(64):
            libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP
        hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)
        assert libc.capset(hdr, (ctypes.c_uint32 * 6)()) == 0
    protect = sys.argv[1] == '1'
    if protect:
        assert protect_this_process()
    walker = '''
    import json, os
    out, pid = [], os.getpid()
    while pid > 1:
        pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        try:
            env = open(f"/proc/{pid}/environ", "rb").read()
            out.append([pid, "read", b"HUNTER2" in env])
        except OSError as e:
            out.append([pid, type(e).__name__, False])
    print(json.dumps(out))
    '''
    judge = f'''
    import sys
    from pathlib import Path
    from nsight_core.processes.sandbox import SandboxLimits, run_sandboxed
    out = run_sandboxed([sys.executable, '-c', {walker!r}], cwd=Path('.'), limits=SandboxLimits(wall_s=30))
    print(out.stdout.text() or out.message)
    '''
    out = run_sandboxed([sys.executable, '-c', judge], cwd=Path('.'), limits=SandboxLimits(wall_s=60),
                        env={'PYTHONPATH': os.environ['PYTHONPATH']})
    print(json.dumps({'server': os.getpid(), 'walk': json.loads(out.stdout.text() or out.message)}))
    """
)


@linux_only
@pytest.mark.parametrize("protect", [True, False])
def test_candidate_cannot_read_the_servers_environment_up_the_ppid_chain(
    tmp_path: Path, protect: bool
) -> None:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "API_SECRET": "HUNTER2"}
    proc = subprocess.run(
        [PY, "-c", CHAIN_SERVER, "1" if protect else "0"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    walk = {pid: (how, leaked) for pid, how, leaked in report["walk"]}
    # The judge (the candidate's parent) is readable but holds only the scrubbed environment.
    _judge, first_how, first_leaked = report["walk"][0]
    assert first_how == "read" and not first_leaked
    server = walk[report["server"]]
    if protect:
        assert server == ("PermissionError", False)
    else:
        # Documented limit without protect_this_process: same uid reads the server's environ.
        assert server == ("read", True)
    assert not any(
        leaked for pid, (how, leaked) in walk.items() if pid != report["server"] or protect
    )


def test_protect_this_process_makes_it_non_dumpable() -> None:
    code = (
        "import ctypes\nfrom nsight_core.processes.sandbox import protect_this_process\n"
        "print(protect_this_process(), ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))"
    )
    out = subprocess.run(
        [PY, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert out.stdout.split() == ["True", "0"]
    assert sandbox_mechanisms().this_process_protected is False


needs_landlock = pytest.mark.skipif(landlock_abi() < 1, reason="kernel without Landlock")


@needs_landlock
def test_landlock_confines_the_candidate_to_its_allow_list(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / "index.json").write_text("{}")
    work = tmp_path / "work"
    work.mkdir()
    (work / "kernel.py").write_text("X = 1\n")
    code = textwrap.dedent(
        f"""
        import os, json
        def attempt(f):
            try:
                f()
                return "ok"
            except OSError as e:
                return type(e).__name__
        store = {str(store)!r}
        print(json.dumps({{
            "read_work": attempt(lambda: open("kernel.py").read()),
            "write_work": attempt(lambda: open("new.py", "w").write("x")),
            "write_tmp": attempt(lambda: open(os.path.join(os.environ["TMPDIR"], "t"), "w").write("x")),
            "read_store": attempt(lambda: open(os.path.join(store, "index.json")).read()),
            "list_store": attempt(lambda: os.listdir(store)),
            "write_store": attempt(lambda: open(os.path.join(store, "evil"), "w").write("x")),
            "signal_parent": attempt(lambda: os.kill(os.getppid(), 0)),
            "import_json": "ok",
        }}))
        """
    )
    out = run_sandboxed([PY, "-c", code], cwd=work, limits=QUICK, fs_access=default_fs_access(work))
    assert out.error_class is None, out.message
    seen = json.loads(out.stdout.text())
    assert seen["read_work"] == seen["write_tmp"] == seen["import_json"] == "ok"
    assert seen["write_work"] == "PermissionError"
    assert seen["read_store"] == seen["list_store"] == seen["write_store"] == "PermissionError"
    if landlock_abi() >= 6:
        assert seen["signal_parent"] == "PermissionError"
    assert sorted(p.name for p in store.iterdir()) == ["index.json"]


@needs_landlock
def test_without_fs_access_the_same_candidate_reaches_the_store(tmp_path: Path) -> None:
    (tmp_path / "index.json").write_text("{}")
    code = f"print(open({str(tmp_path / 'index.json')!r}).read())"
    out = run_sandboxed([PY, "-c", code], cwd=Path("/"), limits=QUICK)
    assert out.stdout.text().strip() == "{}"


def test_mechanisms_name_what_is_in_force() -> None:
    m = sandbox_mechanisms()
    if sys.platform.startswith("linux"):
        assert "PR_SET_PDEATHSIG" in m.parent_death and "subreaper" in m.descendants
    assert m.memory_limit_bytes >= 0 and m.landlock_abi == landlock_abi()
