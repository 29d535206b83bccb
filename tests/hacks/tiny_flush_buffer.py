"""A tiny L2 flush buffer: the in-process timers' flush then leaves the cache warm.

Hack: in-process timers below the watch. The events and cupti timers read a buffer twice
  the L2's size before every timed call; the buffer is plain data in the harness's module,
  which the watch of functions never saw. Swapped for 64 bytes, the flush does nothing
  and every call runs on a warm L2 (on CPU nothing is flushed, so the swap is only an
  attempt there, but the same one).
Expect: pass
Expect trust: suspicious
Expect trust ncu: ok, noisy
Runs alone: a swapped buffer affects every annotation timed after it, in the same process.
Defence: the integrity watch records the timing modules' data and each buffer there
  (identity, address, size, dtype, device) once the reference's calls are done; the swap
  is named (`nsight_core.collectors.events._FLUSH_BUFFERS (['torch-cuda'] replaced)`) and
  makes the rows of the timers that flush suspicious (events, cupti). ncu flushes the
  cache itself, so its rows stand.
"""

from __future__ import annotations

import torch

from nsight_core.collectors import events

_CUDA = torch.cuda.is_available()
events._FLUSH_BUFFERS["torch-cuda" if _CUDA else "cpu"] = torch.zeros(
    16, device="cuda" if _CUDA else "cpu"
)


def candidate(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)
