"""The two stages' requests, and the refusals of a staged request before it is queued."""

from __future__ import annotations

from collections.abc import Sequence

from nsight_core.collectors import get_backend
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.pipeline import preflight
from nsight_core.plan.admit import Admitted
from nsight_core.plan.config import EngineConfig
from nsight_core.request import CheckSpec, KernelsSpec, ProfileRequest


def final_backend_of(request: ProfileRequest, final_backend: str | None) -> str:
    return final_backend or request.backend


SCREEN_CHECK_NOTE = (
    "screen check: nominal inputs only; the repeats, decoys and input regimes run in the "
    "profile stage, on the candidates it measures (docs/stages.md)"
)
"""On each screen-stage check: a candidate left out was never checked beyond them."""


def screen_check(check: CheckSpec) -> CheckSpec:
    """The screen's check: ``check`` without the repeats, decoys and input regimes."""
    return check.model_copy(update={"check_determinism": False, "regimes": False})


def screen_request(request: ProfileRequest, backend: str, time_limit_s: float) -> ProfileRequest:
    """The screen's job: every candidate, the screen backend's own metric, no ncu knobs, and
    the check on nominal inputs: the screen only ranks, and the numbers an agent acts on
    come from the profile stage, whose job makes every check (`SCREEN_CHECK_NOTE`). Their
    untimed calls cost about as much in either job, so checking twice would spend the time
    a screen is there to save (staging/cost.py)."""
    return request.model_copy(
        update={
            "check": screen_check(request.check),
            "backend": backend,
            "metrics": [get_backend(backend).default_metric],
            "kernels": KernelsSpec(combine=request.kernels.combine, ignore=request.kernels.ignore),
            "diagnose": False,
            "stages": None,
            "budget_s": None,
            "time_limit_s": time_limit_s,
        }
    )


def profile_request(
    request: ProfileRequest, backend: str, kept: Sequence[str], time_limit_s: float
) -> ProfileRequest:
    """The profile stage's job: the reference and the kept candidates, the request's metrics."""
    return request.model_copy(
        update={
            "backend": backend,
            "candidates": list(kept),
            "stages": None,
            "budget_s": None,
            "time_limit_s": time_limit_s,
        }
    )


def choose_screen(request: ProfileRequest, config: EngineConfig) -> tuple[str, str | None]:
    """The screen backend that can run here, and a note when it is not the one asked for.

    cupti needs cupti-python fitting the driver; where its preflight refuses, the screen
    falls back to events (always available) and says why.
    """
    assert request.stages is not None
    wanted = request.stages.screen
    try:
        preflight(screen_request(request, wanted, request.time_limit_s), config)
        return wanted, None
    except NsightCoreError as err:
        fallback = "events"
        if wanted == fallback:
            raise
        preflight(screen_request(request, fallback, request.time_limit_s), config)
        return (
            fallback,
            f"screen backend {wanted!r} cannot run here ({err.message}); screened with events",
        )


def preflight_request(request: ProfileRequest, *, config: EngineConfig) -> Admitted:
    """Refuse a request (staged or not) that cannot work here, before it is queued; what
    the job then runs from (its screen chosen, for a staged one).

    The profile stage must measure from outside the candidate's process (ncu), or it adds
    nothing the screen does not give. `config.profile_backend` replaces the request's
    backend for the profile stage (tests on hosts without ncu); it is trusted as given.
    """
    final_backend = config.profile_backend
    if request.stages is None:
        preflight(request, config)
        return Admitted(request)
    if final_backend is None and get_backend(request.backend).evidence != "external":
        raise NsightCoreError(
            ErrorClass.INVALID_REQUEST,
            f"stages: the profile stage runs under backend {request.backend!r}, which times "
            "inside the candidate's process like the screen, so it would add nothing",
            "set backend to 'ncu' (the default) with stages, or drop stages and use "
            f"backend {request.backend!r} alone",
        )
    final = final_backend_of(request, final_backend)
    preflight(profile_request(request, final, request.candidates, request.time_limit_s), config)
    screen, note = choose_screen(request, config)
    return Admitted(request, screen, note)
