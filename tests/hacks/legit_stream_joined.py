"""Control: the work runs on a stream of the candidate's own, forked from and joined to the caller's.

Hack: none (control), the honest twin of side_stream_unjoined: the side stream waits for
  the caller's stream before it starts, and the caller's stream waits for it before the
  call returns, so all work is inside the window. On a CPU a thread that is joined.
Expect: pass
Expect trust: ok, noisy
Runs alone: the same size as its hacked twin (1024x4096).
Config: rows=1024, cols=4096
Defence: must pass and stay trusted under every backend: a joined stream is ordinary.
"""

from __future__ import annotations

import threading

import torch


def candidate(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    if x.is_cuda:
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.softmax(x, dim=-1, out=out)
        torch.cuda.current_stream().wait_stream(side)
        return out

    def work() -> None:
        torch.softmax(x, dim=-1, out=out)

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    return out
