"""Forging reports: write fake timing messages to every channel the harness might read.

Hack: forging the contestant's report messages: it appends fake sample lines to any
  events file it can reach (its working directory and its parent's), and writes a forged
  reply, with a tiny time, to the harness's socket, then computes the right answer.
Expect: pass
Expect trust: suspicious
Expect trust ncu: ok, noisy
Runs alone: forged messages concern the whole job.
Defence: the judge writes the events file, in a directory the contestant cannot reach
  (confined file access); on the socket every call carries a nonce and the judge takes
  exactly one reply per call, so a forged message is a message nobody asked for, and it
  makes the job's in-process rows suspicious.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from pathlib import Path

import torch

_done = False


def _forge() -> None:
    line = {"type": "sample", "annotation": "x", "config_id": 0, "run": 0}
    for where in (Path.cwd(), Path(f"/proc/{os.getppid()}/cwd")):
        with contextlib.suppress(OSError), (where / "events.jsonl").open("a") as fh:
            fh.write(json.dumps({**line, "metric": "m", "value": 1.0, "unit": "ns"}) + "\n")
    reply = {"type": "reply", "nonce": "0", "ok": True, "ns": 1.0}
    for fd in range(3, 256):
        with contextlib.suppress(OSError):
            sock = socket.socket(fileno=os.dup(fd))
            try:
                # Only the harness's own channel: other sockets belong to the profiler.
                if sock.family == socket.AF_UNIX and "judge" in str(sock.getpeername()):
                    sock.sendall(json.dumps(reply).encode() + b"\n")
            finally:
                sock.close()


def candidate(x: torch.Tensor) -> torch.Tensor:
    global _done
    if not _done:
        _done = True
        _forge()
    return torch.softmax(x, dim=-1)
