"""Work on a stream never joined: the call returns while its output is still being written.

Hack: work outside the timed window. The candidate queues the softmax on a stream of its
  own that never waits for the caller's stream and is never joined back, and returns the
  output that stream is still writing. Under events the end event on the caller's stream
  fires at once (and with the stream held, the side stream's work could even run before
  the start event); the device-wide synchronization before the output is copied into the
  judge's slot still made the output right. On a CPU, where there are no streams, the work
  goes to a thread that is never joined (and sleeps 5 ms first, as in thread_after_return).
  Honest twin: legit_stream_joined.
Expect: incorrect or pass
Expect trust: ok, noisy
Expect trust events: suspicious
Runs alone: its size (1024x4096) keeps the side stream writing while the copy behind the
  end event reads the output.
Config: rows=1024, cols=4096
Defence: events: every stream torch hands out waits for the window's start, the output is
  copied right behind the end event and compared with what it is once in the judge's slot
  (output changed after the call returned: incorrect), and how long the device stayed busy
  after the window is measured (work ran after the timed window closed: suspicious). cupti
  and ncu time every kernel the call launched, on any stream, so the candidate passes there
  with its true time. On a CPU the unjoined thread is caught as in thread_after_return.
"""

from __future__ import annotations

import threading
import time

import torch


def candidate(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    if x.is_cuda:
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        with torch.cuda.stream(side):
            torch.softmax(x, dim=-1, out=out)
        return out

    def work() -> None:
        time.sleep(0.005)
        torch.softmax(x, dim=-1, out=out)

    threading.Thread(target=work, daemon=True).start()
    return out
