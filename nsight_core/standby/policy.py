"""The standby pool's policy: which pre-started judges a GPU keeps, and which must end first.

A judge's states, as the pool (standby.py) sees them:

| state     | what lives                                          | how the pool knows       | next                                   |
|-----------|-----------------------------------------------------|--------------------------|----------------------------------------|
| starting  | the judge; a pre-started one's contestant too       | no ready file yet        | idle; or retired (`before_job`)        |
| idle      | both waiting (an idle judge: the judge alone)       | the ready file           | seated by a job of its key; or retired |
| seated    | a job handed over on its socket                     | `hand` answered ``ok``   | running                                |
| running   | the job's calls                                     | `Standby.wait`           | releasing, or ended (limit, crash)     |
| releasing | the job's events complete, the process still ending | the release pipe said 0  | gone; the next job waits (`settle`)    |

The rules, each with its reason:

- **One profiler per GPU.** A process that ncu profiles holds its GPU's profiler from its
  first profiled kernel (our contestants profile the prime at their start) until it ends,
  idle or not, and another ncu process on that GPU then fails ("a driver resource was
  unavailable") or waits (measured on an H100: docs/sandbox.md). So a GPU's pool
  keeps at most one judge whose contestant holds the profiler (`Backend.holds_profiler`), and
  a job whose contestant will hold it retires every other one before it starts.
- **At most `capacity` standbys**, one per recent key (a staged request alternates two), the
  oldest retired first: each holds a CUDA context (GPU memory) while it waits.
- **Nothing starts while a job measures.** A job waits for standbys still starting and for a
  released judge still ending (`StandbyPool.settle`); a speculative standby (remembered from
  an earlier server) still starting is retired rather than waited for.
- **An idle judge** (no settings until a job comes) serves any job of its environment and
  memory limit that finds no standby of its own key.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from nsight_core.collectors import get_backend
from nsight_core.plan.config import DEFAULT_IDLE_S
from nsight_core.protocol import LaunchSpec

DEFAULT_CAPACITY = 2


@dataclass(frozen=True)
class StandbyKey:
    """What must be equal for a job to use a standby: the spec, the environment and the
    memory limit of the job's processes (the plan's: plan/job_plan.py)."""

    spec: str
    """The `LaunchSpec` as JSON: what the standby judge reads from its directory."""
    env: tuple[tuple[str, str], ...]
    memory_bytes: int | None = None
    """The processes' memory limit, fixed when they start (None: the sandbox's default)."""

    @classmethod
    def of(
        cls, spec: LaunchSpec, env: Mapping[str, str], memory_bytes: int | None = None
    ) -> StandbyKey:
        return cls(spec.model_dump_json(), tuple(sorted(env.items())), memory_bytes)


@functools.lru_cache(maxsize=64)
def holds_profiler(spec: str) -> bool:
    """Whether a contestant launched for ``spec`` (a `LaunchSpec` as JSON; empty for an idle
    judge, which has none) holds its GPU's profiler while it lives."""
    if not spec:
        return False
    return get_backend(LaunchSpec.model_validate_json(spec).backend).holds_profiler


@dataclass(frozen=True)
class PoolPolicy:
    """The numbers and rules of one GPU's pool (the module's docstring gives the reasons)."""

    capacity: int = DEFAULT_CAPACITY
    idle_s: float = DEFAULT_IDLE_S
    """How long a standby waits for a job before it is retired."""

    def rivals(self, held: StandbyKey, key: StandbyKey) -> bool:
        """Whether a standby for ``held`` must end before ``key``'s contestant starts on
        the same GPU: both hold a profiler, and only one profiling session may live there."""
        return held != key and holds_profiler(held.spec) and holds_profiler(key.spec)

    def serves(self, idle: StandbyKey, key: StandbyKey) -> bool:
        """Whether an idle judge kept for ``idle`` may take ``key``'s job: its processes
        get that environment and memory limit."""
        return idle.env == key.env and idle.memory_bytes == key.memory_bytes

    def displaced(self, kept: Iterable[StandbyKey], key: StandbyKey) -> list[StandbyKey]:
        """The standbys to retire before one for ``key`` starts (oldest first in ``kept``):
        ``key``'s own, its rivals, then the oldest beyond capacity."""
        keys = list(kept)
        out = [k for k in keys if k == key or self.rivals(k, key)]
        rest = [k for k in keys if k not in out]
        return out + rest[: max(0, len(rest) - (max(1, self.capacity) - 1))]
