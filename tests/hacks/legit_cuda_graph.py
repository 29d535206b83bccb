"""Control: a candidate that captures its kernels in a CUDA graph once and replays it.

Hack: none (control). A common launch-overhead optimisation: the first call per shape
  captures the softmax into a CUDA graph over static buffers; every call copies its input
  in, replays the graph and returns a copy of the static output. On CPU there are no graphs:
  it computes directly.
Expect: pass
Expect trust: ok, noisy
Defence: must pass; the replayed kernels launch inside the call's timed range, and the
  capture happens in the config's first (untimed) call, which ncu leaves out.
"""

from __future__ import annotations

from typing import Any

import torch

_graphs: dict[tuple[Any, ...], tuple[Any, torch.Tensor, torch.Tensor]] = {}


def _graph_for(x: torch.Tensor) -> tuple[Any, torch.Tensor, torch.Tensor]:
    key = (tuple(x.shape), x.dtype, x.device)
    if key not in _graphs:
        static_in = torch.empty_like(x)
        static_in.copy_(x)
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.softmax(static_in, dim=-1)  # warm-up before capture, as torch asks
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = torch.softmax(static_in, dim=-1)
        _graphs[key] = (graph, static_in, static_out)
    return _graphs[key]


def candidate(x: torch.Tensor) -> torch.Tensor:
    if not x.is_cuda:
        return torch.softmax(x, dim=-1)
    graph, static_in, static_out = _graph_for(x)
    static_in.copy_(x)
    graph.replay()
    return static_out.clone()
