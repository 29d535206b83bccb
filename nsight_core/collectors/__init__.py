"""Backends (see base.py for the interface); importing this package registers them all."""

from nsight_core.collectors import cupti, events, ncu
from nsight_core.collectors.base import Backend, backend_names, get_backend

__all__ = ["Backend", "backend_names", "cupti", "events", "get_backend", "ncu"]
