"""The `nspy-mcp` command as a person meets it: real subprocesses, a real terminal (pty).

Two promises: the commands for people never load the MCP SDK (it is most of the start-up
time), and the bare server in a terminal says what it is instead of waiting silently.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path
from typing import IO

import pytest

from nspy_mcp.cli import STDIO_TTY_NOTE

# Calls the CLI's main in-process, then reports on stderr which server modules got imported.
RUNNER = """
import json, sys
from nspy_mcp.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
loaded = sorted(m for m in sys.modules if m == "mcp" or m.startswith(("mcp.", "nspy_mcp.server")))
sys.stderr.write("\\nLOADED " + json.dumps(loaded) + "\\n")
sys.exit(code)
"""


def _loaded_by(args: list[str], tmp_path: Path) -> tuple[int, list[str], str]:
    env = dict(os.environ, NSPY_CACHE_DIR=str(tmp_path / "cache"))
    p = subprocess.run(
        [sys.executable, "-c", RUNNER, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    marker = p.stderr.rsplit("LOADED ", 1)
    assert len(marker) == 2, p.stderr
    loaded: list[str] = json.loads(marker[1])
    return p.returncode, loaded, p.stdout


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--help"], 0),
        (["--version"], 0),
        (["report", "--help"], 0),
        (["env", "--json"], 0),
        (["metrics", "gpu__time_duration.sum", "--chip", "zz999"], 2),
        (["report", "no-such-file.ncu-rep"], 2),
        (["plot", "no-such-result", "--store", "STORE"], 2),
    ],
    ids=["help", "version", "report-help", "env", "metrics", "report", "plot"],
)
def test_commands_for_people_never_import_the_mcp_stack(
    args: list[str], code: int, tmp_path: Path
) -> None:
    args = [str(tmp_path / "store") if a == "STORE" else a for a in args]
    returncode, loaded, stdout = _loaded_by(args, tmp_path)
    assert returncode == code, stdout
    assert loaded == []


def test_serve_path_does_import_the_mcp_stack(tmp_path: Path) -> None:
    """The runner does see `mcp` when it is loaded: the empty lists above are not vacuous."""
    code = "import sys, nspy_mcp; nspy_mcp.build_server; print('mcp' in sys.modules)"
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert p.stdout.strip() == "True"


def test_python_m_help_imports_no_mcp_module() -> None:
    """`python -X importtime -m nspy_mcp --help`: the real entry point, every import listed."""
    p = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "nspy_mcp", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert p.returncode == 0 and "usage: nspy-mcp" in p.stdout
    imported = [line.rsplit("|", 1)[-1].strip() for line in p.stderr.splitlines() if "|" in line]
    assert "nspy_mcp.cli" in imported
    assert not [m for m in imported if m == "mcp" or m.startswith("mcp.")]


def _read_until(stream: IO[bytes], needle: bytes, timeout_s: float) -> bytes:
    """Bytes from a pipe until `needle` shows up (or the pipe ends, or time runs out)."""
    fd, got = stream.fileno(), b""
    while needle not in got:
        ready, _, _ = select.select([fd], [], [], timeout_s)
        chunk = os.read(fd, 65536) if ready else b""
        if not chunk:
            break
        got += chunk
    return got


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "pty-test", "version": "0"},
    },
}


def test_bare_server_in_a_terminal_says_so_on_stderr_and_keeps_serving(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    proc = subprocess.Popen(  # bare, as typed: no subcommand means `serve` on stdio
        [sys.executable, "-m", "nspy_mcp"],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ, NSPY_MCP_STORE=str(tmp_path)),
    )
    os.close(slave)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        err = _read_until(proc.stderr, b"Ctrl-C ends it.", 60)
        assert STDIO_TTY_NOTE.encode() in err
        # Still a server: a JSON-RPC line typed into the terminal gets its answer on stdout.
        os.write(master, json.dumps(INITIALIZE).encode() + b"\n")
        out = _read_until(proc.stdout, b"\n", 60)
        answer = json.loads(out.decode().splitlines()[0])
        assert answer["id"] == 1 and answer["result"]["serverInfo"]["name"]
        os.write(master, b"\x04")  # Ctrl-D: end of input ends the server
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        os.close(master)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def test_server_under_a_client_pipe_writes_no_terminal_note(tmp_path: Path) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "nspy_mcp", "serve", "--store", str(tmp_path)],
        input=json.dumps(INITIALIZE) + "\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.splitlines()[0])["id"] == 1
    assert "speaks MCP" not in p.stderr and "serving MCP over stdio" not in p.stderr
