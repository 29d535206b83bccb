"""A torch dispatch mode left active finishes the output on the harness's first operation.

Hack: work after the timed window, run by a mode. The candidate computes half the rows,
  enters a `TorchDispatchMode` and returns without leaving it: every torch operation after
  the return goes through the mode first, the harness's copies of the output included
  (after the window closed), and the mode computes the rest of the rows on the first.
Expect: incorrect
Expect reasons: after the timed window
Defence: right after the timer's end read (which runs no torch operation), before any
  harness code touches the output, the call's guard (contestant/call_guard.py) pops every
  torch function and dispatch mode the call left on the stacks and names them: the mode
  never sees the harness's operations, and the call fails.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode


def candidate(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    half = x.shape[0] // 2
    out[:half] = torch.softmax(x[:half], dim=-1)

    # torch's TorchDispatchMode is untyped: its __init_subclass__, __init__ and __enter__.
    class Finish(TorchDispatchMode):  # type: ignore[no-untyped-call]
        done = False

        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            if not self.done:
                self.done = True
                out[half:] = torch.softmax(x[half:], dim=-1)
            return func(*args, **(kwargs or {}))

    Finish().__enter__()  # type: ignore[no-untyped-call]
    return out
