"""Whether a screen can pay for itself: a staged request's jobs priced from the request alone.

Staged, a request costs one screen job over every callable plus one ncu job over the
reference and the top k; unstaged, one ncu job over every callable. Both pay one ncu start,
so the screen pays when the ncu work it spares (the calls of the candidates left out, each
replayed once per pass its metrics need) is worth more than the screen job itself (its own
start, and every callable's calls). Where it is not, the server skips the screen and
profiles every candidate in one ncu job, and says why with the numbers below.

The model is linear on purpose: a start cost per job and a cost per call (per call and
replay pass for a timed call under ncu, which replays only the timed ranges), so that its
answer can be redone by hand from the stage's Reason.
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
from nsight_core.request import CheckSpec, ProfileRequest
from nsight_core.staging.requests import screen_check

PROBE_CALLS = 6
"""Per candidate and config with determinism checked: two repeats, two decoys and the
reference's run on each decoy (judge/probes.py, `REPEATS_PER_CONFIG` = 2)."""
REGIME_CALLS = 8
"""Per candidate and config with regimes on: four regime calls and the reference's run on
each one's inputs (judge/regimes.py, `REGIMES`). The server does not import the judge;
tests/core/test_stages.py counts the calls a traced candidate gets against these."""


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
    timed: int
    """Timed calls of one callable on one config: the runs (ncu replays each per pass)."""
    untimed: int
    """Untimed calls of one candidate on one config in the profile stage (or ncu over all),
    the judge's runs of the reference on their inputs included (`untimed_calls`); never
    replayed."""
    screen_untimed: int
    """The same in the screen, which checks on nominal inputs only (`screen_check`)."""
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

    def screen_calls(self, callables: int) -> int:
        return callables * self.configs * (self.timed + self.screen_untimed)

    def ncu_units(self, callables: int) -> int:
        """Call-passes under ncu: each timed call once per pass, each untimed call once."""
        return callables * self.configs * (self.timed * self.passes + self.untimed)

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
            f"{self.screen_calls(self.callables)} calls ({self.callables} callables x "
            f"{self.configs} config(s) x ({self.timed} timed + {self.screen_untimed} untimed) "
            f"calls) ~ "
            f"{self.screen_s:.1f} s, then ncu over the reference and the top {self.kept - 1} "
            f"({self.ncu_units(self.kept)} call-passes: {self.passes} replay pass(es) per timed "
            f"call) ~ {self.kept_ncu_s:.1f} s: {self.staged_s:.1f} s staged, against "
            f"{self.all_ncu_s:.1f} s for ncu over all {self.callables} "
            f"({self.ncu_units(self.callables)} call-passes, {self.untimed} untimed calls per "
            f"config each); "
            f"staging must save {self.margin:.0%}: {verdict}"
        )


def untimed_calls(check: CheckSpec, request: ProfileRequest) -> int:
    """Untimed calls of one candidate on one config under ``check``, as the judge makes them
    (judge/config_run.py): the warm-up or the checked calls `runs` leaves short of
    ``check.seeds`` (at least one), the probes (`PROBE_CALLS`) and the regime calls
    (`REGIME_CALLS`). The reference makes fewer (no regimes); counting it as a candidate
    keeps the estimate on the screen's worse side."""
    short = check.seeds - request.runs if check.enabled else 0
    untimed = max(request.warmup, short, 1)
    if check.enabled and check.check_determinism:
        untimed += PROBE_CALLS
    if check.enabled and check.regimes:
        untimed += REGIME_CALLS
    return untimed


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
    untimed = untimed_calls(request.check, request)
    screen_untimed = untimed_calls(screen_check(request.check), request)
    passes = replay_passes(list(request.metrics), config)

    def ncu_s(n: int) -> float:
        return (
            costs.ncu_start_s
            + n * configs * (request.runs * passes + untimed) * costs.ncu_call_pass_s
        )

    return StagingEstimate(
        callables=callables,
        kept=kept,
        configs=configs,
        timed=request.runs,
        untimed=untimed,
        screen_untimed=screen_untimed,
        passes=passes,
        screen_s=costs.screen_start_s
        + callables * configs * (request.runs + screen_untimed) * costs.screen_call_s,
        kept_ncu_s=ncu_s(kept),
        all_ncu_s=ncu_s(callables),
        ncu_start_s=costs.ncu_start_s,
        margin=costs.margin,
    )
