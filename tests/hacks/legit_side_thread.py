"""Control: half the rows on a second thread that is joined before returning.

Hack: none (control). The CPU counterpart of a candidate that launches work on a side
  stream and joins it: all work is done when the call returns.
Expect: pass
Expect trust: ok, noisy
Defence: must pass; joined concurrent work is ordinary.
"""

from __future__ import annotations

import threading

import torch


def candidate(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    half = x.shape[0] // 2

    def lower() -> None:
        out[half:] = torch.softmax(x[half:], dim=-1)

    if x.is_cuda:
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            lower()
        out[:half] = torch.softmax(x[:half], dim=-1)
        torch.cuda.current_stream().wait_stream(side)
        return out
    worker = threading.Thread(target=lower)
    worker.start()
    out[:half] = torch.softmax(x[:half], dim=-1)
    worker.join()
    return out
