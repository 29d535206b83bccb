"""Control: a finalizer that only releases a scratch buffer, after the call returned.

Hack: none (control); the honest twin of after_window_finalizer. The candidate computes in a
  scratch buffer held by a workspace object in a reference cycle (only the collector frees
  it), whose `__del__` drops the buffer, as a workspace pool would. Its output is complete
  when it returns; the finalizer touches nothing the harness reads.
Expect: pass
Expect trust: ok, noisy
Defence: must pass: the call's guard (contestant/call_guard.py) keeps the collector off
  from before the call until the output is in the judge's slot, so the cycle is freed
  later, and names nothing: holding a finalizer back changes no output that was complete.
"""

from __future__ import annotations

import torch


class _Workspace:
    def __init__(self, like: torch.Tensor) -> None:
        self.buf: torch.Tensor | None = torch.empty_like(like)
        self.me = self  # a cycle: only the collector frees it

    def __del__(self) -> None:
        self.buf = None  # release the scratch buffer, nothing else


def candidate(x: torch.Tensor) -> torch.Tensor:
    ws = _Workspace(x)
    buf = ws.buf
    assert buf is not None
    torch.sub(x, x.amax(dim=-1, keepdim=True), out=buf)
    buf.exp_()
    return buf / buf.sum(dim=-1, keepdim=True)
