"""Pre-started judges as an agent meets them: the real MCP client over stdio, a real server.

The second of two identical requests is handed to the judge and contestant the server
started when the first ended (`provenance.phase_seconds` has `standby_idle`, `spawn` 0),
with the same verdicts; when the session ends, no pre-started process outlives the server.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from nsight_core.protocol import READY_FILE, STANDBY_FILE
from tests.core.test_sandbox import alive
from tests.mcp.test_server import softmax_request, structured

# `slow`: each test starts stdio servers and several jobs (test_standby.py runs the pool's
# handover by default). The servers' temporary folders (standby homes among them) are the
# test's own: a server killed with SIGKILL cannot remove its own, and other runs' standbys on
# this host are not counted as this server's.
pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.usefixtures("own_tempdir")]


def standby_pids(under: Path | None = None) -> set[int]:
    """Processes running a pre-started judge (``nsight_core.judge.boot --standby``) or an
    idle one (``--idle``); with ``under``, only those whose home is in that folder."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        judge = b"nsight_core.judge.boot" in cmd and (b"--standby" in cmd or b"--idle" in cmd)
        if judge and (under is None or any(a.startswith(str(under).encode()) for a in cmd)):
            found.add(int(entry.name))
    return found


def outlived(judges: set[int], within_s: float = 15.0) -> set[int]:
    """Those of ``judges`` still running ``within_s`` seconds from now (their server ended)."""
    deadline = time.monotonic() + within_s
    while standby_pids() & judges and time.monotonic() < deadline:
        time.sleep(0.1)
    return standby_pids() & judges


def ready_standbys() -> set[Path]:
    """Homes of pre-started judges whose pair has started (standby.py's ready file), in this
    test's temporary directory (`own_tempdir`); not an idle judge's, which has no settings
    (no standby.json) until it takes a job."""
    homes = Path(tempfile.gettempdir()).glob(f"nspy-standby-*/{READY_FILE}")
    return {p.parent for p in homes if (p.parent / STANDBY_FILE).is_file()}


def server_params(tmp_path: Path) -> StdioServerParameters:
    """`nspy-mcp` over stdio with its own store and pre-started judges on (the default)."""
    env = {**os.environ, "NSPY_MCP_STORE": str(tmp_path / "store")}
    env.pop("NSPY_MCP_STANDBY", None)
    return StdioServerParameters(command=sys.executable, args=["-m", "nspy_mcp"], env=env)


async def test_the_second_request_goes_to_the_pre_started_judge_and_none_outlives_the_server(
    tmp_path: Path,
) -> None:
    before = standby_pids()
    params = server_params(tmp_path)
    answers: list[dict[str, Any]] = []
    with anyio.fail_after(180):
        async with Client(params) as client:
            for _ in range(2):
                result = await client.call_tool(
                    "profile_candidates", {"request": softmax_request()}
                )
                answers.append(structured(result))
            waiting = standby_pids() - before
    first, second = answers
    assert first["status"] == second["status"] == "done", (first["message"], second["message"])
    phases = [a["provenance"]["phase_seconds"] for a in answers]
    assert "standby_idle" not in phases[0] and phases[0]["spawn"] > 0
    # The first went to the idle judge the server started at its own start (handover.py).
    assert "judge.start_left" in phases[0] and "judge.import" not in phases[0], phases[0]
    assert phases[1]["standby_idle"] >= 0 and phases[1]["spawn"] == 0
    verdicts = [{c["Annotation"]: c["Passed"] for c in a["correctness"]} for a in answers]
    assert verdicts[0] == verdicts[1] and sorted(verdicts[1].values()) == [False, True]
    assert waiting, "the server started no judge for the next request"
    assert not outlived(waiting), "a pre-started judge outlived its server"


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def descends_from(pid: int, ancestor: int) -> bool:
    """Whether ``ancestor`` is among ``pid``'s parents (False once either is gone)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        while pid > 1:
            pid = parent_of(pid)
            if pid == ancestor:
                return True
    return False


def all_descendants_gone(pids: set[int]) -> bool:
    return not any(alive(p) for p in pids)


def contestants_of(judge: int) -> set[int]:
    """The judge's descendants (its contestant, under ncu for that backend)."""
    found: set[int] = set()
    frontier = {judge}
    while frontier:
        children = set()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if parent_of(int(entry.name)) in frontier:
                        children.add(int(entry.name))
                except (OSError, ValueError, IndexError):
                    continue
        children -= found
        found |= children
        frontier = children
    return found


async def test_a_server_killed_with_sigkill_takes_its_pre_started_judge_and_contestant_along(
    tmp_path: Path,
) -> None:
    before = standby_pids()
    params = server_params(tmp_path)
    waiting: set[int] = set()
    family: set[int] = set()
    with anyio.fail_after(120):
        try:
            async with Client(params) as client:
                await client.call_tool("profile_candidates", {"request": softmax_request()})
                for _ in range(300):  # the standby starts once the job has ended
                    # Ours only: another test's server may still be ending beside this one.
                    mine = os.getpid()
                    waiting = {p for p in standby_pids() - before if descends_from(p, mine)}
                    if waiting:
                        break
                    await anyio.sleep(0.1)
                if waiting:
                    judge = next(iter(waiting))
                    for _ in range(100):  # its contestant is starting (slower on a busy host)
                        # Any of ours with its contestant: the pool may retire a pair it
                        # started and start another, and a retired judge ends after its
                        # contestant.
                        mine = os.getpid()
                        ours = {p for p in standby_pids() - before if descends_from(p, mine)}
                        found = {j: {j, *contestants_of(j)} for j in sorted(ours)}
                        judge = max(found, key=lambda j: len(found[j]), default=judge)
                        family = found.get(judge, {judge})
                        if len(family) >= 2:
                            break
                        await anyio.sleep(0.1)
                    os.kill(parent_of(judge), signal.SIGKILL)  # the server, without warning
                    await anyio.sleep(0.5)
        except Exception:  # the client's transport breaks with its server: expected here
            pass
    assert waiting, "no judge was pre-started"
    assert len(family) >= 2, "the pre-started judge had no contestant to check"
    deadline = time.monotonic() + 15
    while not all_descendants_gone(family) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all_descendants_gone(family), "a pre-started process outlived its killed server"


async def test_a_restarted_server_pre_starts_the_settings_its_store_remembers(
    tmp_path: Path,
) -> None:
    """A second server on the same store starts the standby the first one left settings
    for (`standby.json` in the store) at its own start: its first request, sent once that
    pair is up, is handed over.
    With NSPY_MCP_STANDBY_AT_START=0 a third one starts its first request cold."""
    params = server_params(tmp_path)
    with anyio.fail_after(240):
        async with Client(params) as client:
            first = structured(
                await client.call_tool("profile_candidates", {"request": softmax_request()})
            )
        assert (tmp_path / "store" / "standby.json").is_file()
        before = ready_standbys()
        async with Client(params) as client:
            # The agent's first thought: the pair the server started is up before the request
            # (one still starting would be retired and the request would start cold).
            with anyio.fail_after(60):
                while not ready_standbys() - before:
                    await anyio.sleep(0.05)
            second = structured(
                await client.call_tool("profile_candidates", {"request": softmax_request()})
            )
        off = StdioServerParameters(
            command=params.command,
            args=params.args,
            env={**(params.env or {}), "NSPY_MCP_STANDBY_AT_START": "0"},
        )
        async with Client(off) as client:
            third = structured(
                await client.call_tool("profile_candidates", {"request": softmax_request()})
            )
    answers = (first, second, third)
    assert [a["status"] for a in answers] == ["done"] * 3, [a["message"] for a in answers]
    phases = [a["provenance"]["phase_seconds"] for a in answers]
    assert "standby_idle" not in phases[0] and phases[0]["spawn"] > 0
    assert phases[1]["standby_idle"] >= 0 and phases[1]["spawn"] == 0
    assert "standby_idle" not in phases[2] and phases[2]["spawn"] > 0
    verdicts = [{c["Annotation"]: c["Passed"] for c in a["correctness"]} for a in answers]
    assert verdicts[0] == verdicts[1] == verdicts[2]


def _judge_start_line_before_mcp(stderr: list[str]) -> tuple[int | None, list[str]]:
    """The line number of the server's "an idle judge is starting" log (``-v``) and the MCP
    SDK's modules whose import ended before it (``-X importtime``)."""
    sdk: list[str] = []
    for n, line in enumerate(stderr):
        if "an idle judge is starting" in line:
            return n, sdk
        if line.startswith("import time:"):
            name = line.rsplit("|", 1)[-1].strip()
            if name == "mcp" or name.startswith("mcp."):
                sdk.append(name)
    return None, sdk


def test_nspy_mcp_serve_starts_its_idle_judge_before_it_imports_the_mcp_sdk(
    tmp_path: Path,
) -> None:
    """The command starts each GPU's idle judge first, so the judge's start (torch, a CUDA
    context) runs beside the SDK's import and the server's build, the longest part of a
    server's start; a server whose client leaves before any request takes it along."""
    before = standby_pids()
    params = server_params(tmp_path)
    argv = [params.command, "-X", "importtime", "-m", "nspy_mcp", "-v", "serve"]
    with subprocess.Popen(
        argv, env=params.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    ) as server:  # fmt: skip
        assert server.stdin is not None and server.stderr is not None
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = server.stderr.readline()
            if not line:
                break
            lines.append(line)
            if "an idle judge is starting" in line:
                break
        judges: set[int] = set()
        while not judges and time.monotonic() < deadline:  # its process is being spawned
            judges = {p for p in standby_pids() - before if descends_from(p, server.pid)}
            time.sleep(0.05)
        server.stdin.close()  # the client leaves before any request
        server.stderr.read()  # until the server's end closes it
        server.wait(timeout=60)
    at, sdk = _judge_start_line_before_mcp(lines)
    assert at is not None, "".join(lines[-20:])
    assert sdk == [], f"the MCP SDK was imported before the idle judge started: {sdk[:3]}"
    assert server.returncode == 0
    assert judges, "no idle judge process was found under the server"
    assert not outlived(judges), "an idle judge outlived its server"


def test_a_server_that_refuses_to_start_retires_the_judges_it_started(
    tmp_path: Path, own_tempdir: Path
) -> None:
    """HTTP on a non-loopback address is refused after the idle judge has started: it does
    not outlive the refusal (the judges homed in this test's temporary folder: the server's
    pid is gone when they are looked for)."""
    params = server_params(tmp_path)
    done = subprocess.run(
        [params.command, "-m", "nspy_mcp", "-v", "serve", "--http", "--host", "0.0.0.0"],
        env=params.env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2 and "refusing to serve HTTP" in done.stderr, done.stderr
    assert "an idle judge is starting" in done.stderr, done.stderr
    assert not outlived(standby_pids(under=own_tempdir)), "an idle judge outlived the refusal"
