"""Backends (see base.py for the interface), each imported when it is first asked for.

A contestant imports only its own timer's module: importing every backend here would load
ncu's too, and with it the metric catalog, diagnose and the environment probe (on CPU,
`import nsight_core.contestant.core` took 0.36 s with them and 0.25 s without).
"""

import importlib

from nsight_core.collectors.base import Backend
from nsight_core.collectors.base import get_backend as _registered
from nsight_core.request import Backend as BackendName

BACKENDS = ("cupti", "events", "ncu")
BACKEND_ORDER: tuple[BackendName, ...] = ("ncu", "cupti", "events")
"""Preferred first, where a request names none: ncu's numbers are external and take any
metric; events runs anywhere."""


def get_backend(name: str) -> Backend:
    """The backend called ``name``, its module imported (and so registered) on first use; an
    invalid_request naming them all if there is none."""
    for each in (name,) if name in BACKENDS else BACKENDS:
        _load(each)
    return _registered(name)


def _load(name: str) -> None:
    importlib.import_module(f"{__name__}.{name}")  # lazy: the module registers on first use


def backend_names() -> list[str]:
    return sorted(BACKENDS)


__all__ = ["BACKENDS", "BACKEND_ORDER", "Backend", "backend_names", "get_backend"]
