"""A request admitted on one host: filled in, checked, and its screen chosen, once.

The server fills a request's left-out settings (`request_defaults`) and runs the preflight
before it queues the job; the job then runs from this record and neither step runs again
(`staging.requests.preflight_request` makes it; `stages.run_job`, `stages.run_staged` and
`pipeline.run_profile_job` take it). A bare
`ProfileRequest` handed to the engine by a library caller, or to a cluster worker on
another host, is admitted there, at that entry.
"""

from __future__ import annotations

from dataclasses import dataclass

from nsight_core.request import ProfileRequest


@dataclass(frozen=True)
class Admitted:
    request: ProfileRequest
    """Resolved (`request_defaults.resolve_defaults`) and preflighted for this host."""
    screen: str | None = None
    """With `stages`: the screen backend that runs here (`choose_screen`)."""
    screen_note: str | None = None
    """Why the screen is not the one asked for, if it is not."""
