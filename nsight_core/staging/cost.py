"""Whether a screen can pay for itself: a staged request's jobs priced from the request alone.

Staged, a request costs one screen job over every callable plus one ncu job over the
reference and the top k; unstaged, one ncu job over every callable. Both pay one ncu start,
so the screen pays when the ncu work it spares (the calls of the candidates left out, each
replayed once per pass its metrics need) is worth more than the screen job itself (its own
start, and every callable's calls). Where it is not, the server skips the screen and
profiles every candidate in one ncu job, and says why with the numbers below.

The model is linear on purpose: a start cost per job and a cost per call (per call and
replay pass under ncu), so that its answer can be redone by hand from the stage's Reason.
It knows nothing of kernels per call or of the host's load; its constants were measured on
the H200 (docs/stages.md, "When the screen is skipped", says where each comes from), and
where two measurements differed it takes the one that makes the screen look worse, so that
a staged request is never the slower way to a result.
"""

from __future__ import annotations

from dataclasses import dataclass

from nsight_core.errors import NsightCoreError
from nsight_core.host.catalog import validate_metrics
from nsight_core.plan.config import EngineConfig
from nsight_core.request import ProfileRequest


@dataclass(frozen=True)
class StageCosts:
    """Seconds per part of a staged request's jobs (docs/stages.md: where each was measured)."""

    ncu_start_s: float
    """An ncu job's start and end: python, torch, the CUDA context, ncu's own start."""
    ncu_call_pass_s: float
    """One call of one callable under ncu, per replay pass its metrics need."""
    screen_start_s: float
    """A screen job's start and end (cold: no pre-started judge)."""
    screen_call_s: float
    """One call of one callable in the screen (check, inputs, the timed call)."""
    margin: float
    """The share of the ncu-only estimate a screen must save before it is chosen: a screen
    that only breaks even adds a second job (its start, its failures) for nothing."""


H200_COSTS = StageCosts(
    ncu_start_s=5.0,
    ncu_call_pass_s=0.052,
    screen_start_s=5.0,
    screen_call_s=0.054,
    margin=0.1,
)
"""The server's costs: the H200's, from the measurements docs/stages.md names."""


@dataclass(frozen=True)
class StagingEstimate:
    """A staged request priced both ways, and what each price is made of."""

    callables: int
    """The reference and every candidate."""
    kept: int
    """The reference and the top k: what the profile stage measures."""
    configs: int
    calls_per_config: int
    """Calls of one callable on one config: untimed (warm-up, extra check seeds), timed
    runs, and the determinism check's second call."""
    passes: int
    """ncu's replay passes per kernel for the request's metrics (validate_metrics' estimate)."""
    screen_s: float
    kept_ncu_s: float
    all_ncu_s: float
    ncu_start_s: float
    """The part of each ncu estimate that is the job's start (the rest is its calls)."""
    margin: float

    @property
    def staged_s(self) -> float:
        return self.screen_s + self.kept_ncu_s

    @property
    def pays(self) -> bool:
        """The screen and the top k under ncu are estimated to save at least `margin`."""
        return self.staged_s <= (1.0 - self.margin) * self.all_ncu_s

    def calls(self, callables: int) -> int:
        return callables * self.configs * self.calls_per_config

    def explain(self) -> str:
        """The estimate in words, with every number it was made from."""
        verdict = (
            "the screen pays"
            if self.pays
            else "the screen cannot pay here, so it was skipped and every candidate was "
            "checked and profiled in one job, as without stages"
        )
        return (
            f"staging estimate (docs/stages.md, 'When the screen is skipped'): screen "
            f"{self.calls(self.callables)} calls ({self.callables} callables x {self.configs} "
            f"config(s) x {self.calls_per_config} calls) ~ {self.screen_s:.1f} s, then ncu "
            f"over the reference and the top {self.kept - 1} ({self.calls(self.kept)} calls x "
            f"{self.passes} replay pass(es)) ~ {self.kept_ncu_s:.1f} s: {self.staged_s:.1f} s "
            f"staged, against {self.all_ncu_s:.1f} s for ncu over all "
            f"{self.callables} ({self.calls(self.callables)} calls x {self.passes} pass(es)); "
            f"staging must save {self.margin:.0%}: {verdict}"
        )


def calls_per_config(request: ProfileRequest) -> int:
    """Calls of one callable on one config, as the judge makes them (judge/config_run.py,
    `untimed_calls`, and its determinism check on the first checked call)."""
    check = request.check
    short = check.seeds - request.runs if check.enabled else 0
    untimed = max(request.warmup, short, 1)
    determinism = 1 if check.enabled and check.check_determinism else 0
    return untimed + request.runs + determinism


def replay_passes(metrics: list[str], config: EngineConfig) -> int:
    """ncu's passes per kernel for `metrics`: the catalog's estimate, 1 where it has none."""
    try:
        passes = validate_metrics(metrics, config=config).estimated_passes
    except NsightCoreError:
        passes = None
    return max(1, passes or 1)


def estimate_staging(
    request: ProfileRequest, costs: StageCosts, config: EngineConfig
) -> StagingEstimate:
    """`request` (with stages) priced staged and unstaged under `costs`; ``config``'s ncu and
    GPU decide the catalog that counts the replay passes."""
    assert request.stages is not None
    callables = len(request.annotations)
    kept = min(callables, 1 + request.stages.top_k)
    configs = len(request.configs)
    per = calls_per_config(request)
    passes = replay_passes(list(request.metrics), config)

    def ncu_s(n: int) -> float:
        return costs.ncu_start_s + n * configs * per * passes * costs.ncu_call_pass_s

    return StagingEstimate(
        callables=callables,
        kept=kept,
        configs=configs,
        calls_per_config=per,
        passes=passes,
        screen_s=costs.screen_start_s + callables * configs * per * costs.screen_call_s,
        kept_ncu_s=ncu_s(kept),
        all_ncu_s=ncu_s(callables),
        ncu_start_s=costs.ncu_start_s,
        margin=costs.margin,
    )
