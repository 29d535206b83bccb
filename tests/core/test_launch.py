"""The judge's end of a contestant's socket, with real sockets and processes."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import pytest

from nsight_core.processes.launch import (
    Channel,
    ContestantGone,
    LaunchPlan,
    launch,
)
from nsight_core.runtime.files import CONTESTANT_SOCKET


def test_a_contestant_that_is_gone_when_the_judge_sends_is_contestant_gone(
    tmp_path: Path,
) -> None:
    """A contestant ended by its limit while the judge sends it a message: the judge must see
    the process as gone (its job then ends as timed out or crashed), not fail internally."""
    chan = Channel(tmp_path / CONTESTANT_SOCKET)
    peer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    peer.connect(str(tmp_path / CONTESTANT_SOCKET))
    chan.accept(lambda: True, time.monotonic() + 5)
    peer.close()
    with pytest.raises(ContestantGone):
        for _ in range(64):  # the first sends may still land in the socket's buffer
            chan.send(b"x" * 65536)
    with pytest.raises(ContestantGone):
        chan.recv_line(lambda: True)
    chan.close()


def test_launch_starts_the_planned_command_in_its_private_directory(tmp_path: Path) -> None:
    private, out = tmp_path / "private", tmp_path / "out"
    private.mkdir()
    out.mkdir()
    code = (
        "import os, socket, sys; s = socket.socket(socket.AF_UNIX); "
        f"s.connect({CONTESTANT_SOCKET!r}); s.sendall(os.getcwd().encode() + b'\\n')"
    )
    plan = LaunchPlan(argv=[sys.executable, "-c", code], private=str(private), out_dir=str(out))
    plan.write(tmp_path)
    assert LaunchPlan.read(tmp_path) == plan
    launched = launch(plan)
    launched.chan.accept(launched.proc.alive, time.monotonic() + 30)
    assert launched.chan.recv_line(launched.proc.alive) == str(private).encode()
    outcome = launched.proc.wait(30)
    assert outcome is not None and outcome.exit_code == 0
    launched.chan.close()
