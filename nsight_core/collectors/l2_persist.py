"""Persisting L2 lines cleared before every timed call of the events and cupti timers.

The L2 flush (`events.Device.flush_l2`) evicts lines by reading a buffer larger than the
cache, but lines a program marked persisting stay: CUDA sets aside part of L2 for them
(the context's persisting-L2 limit) and an access-policy window on a stream marks a range
of memory persisting for the kernels launched there. A candidate that raises the limit and
marks its data persisting in one call finds that data in L2 in the next, through the
flush, and reads "memory" faster than the bus allows (karpathy/llm.c PR #851 measured more
than four times an H100's bandwidth that way). So before each timed call's flush the
harness sets the limit back to 0, makes every persisting line normal again
(``cuCtxResetPersistingL2Cache``) and clears the harness stream's window; the flush then
evicts what the candidate kept. After a timed call, a limit or window left set is named
in the candidate's Reasons: the reset already took away what it could gain across calls,
and within one call persisting lines are an honest optimisation, so it is no verdict.

The driver's functions are bound once, when the timer starts and before any job code runs
(a candidate's rebinding of this module's data is the integrity watch's to see). Where the
driver has no such limit (before Ampere, or no CUDA), nothing is done and `unavailable`
says why.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

DRIVER = "libcuda.so.1"
LIMIT_PERSISTING_L2 = 0x06
"""``CU_LIMIT_PERSISTING_L2_CACHE_SIZE`` (cuda.h)."""
STREAM_ACCESS_POLICY_WINDOW = 1
"""``CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW`` (cuda.h)."""
_ATTR_BYTES = 64
"""``CUstreamAttrValue`` is a union padded to 64 bytes; its access-policy window starts
with ``void *base_ptr`` and ``size_t num_bytes``."""


@dataclass
class PersistingL2:
    """The harness's reset of persisting L2 state, and what it found left set."""

    unavailable: str = ""
    """Why nothing is reset here ('' once bound and working)."""
    _get: Any = field(default=None, repr=False)
    _set: Any = field(default=None, repr=False)
    _reset: Any = field(default=None, repr=False)
    _get_attr: Any = field(default=None, repr=False)
    _set_attr: Any = field(default=None, repr=False)
    _armed: bool = field(default=False, repr=False)
    """Set by `reset`: only a call that began with nothing set can be said to have set it
    (under ncu the harness does not reset, and ncu sets the limit itself)."""

    def bind(self) -> None:
        """Take the driver's functions now, before job code runs; harmless without CUDA."""
        try:
            lib = ctypes.CDLL(DRIVER)
            self._get, self._set = lib.cuCtxGetLimit, lib.cuCtxSetLimit
            self._reset = lib.cuCtxResetPersistingL2Cache
            self._get_attr, self._set_attr = lib.cuStreamGetAttribute, lib.cuStreamSetAttribute
        except (OSError, AttributeError) as exc:
            self.unavailable = f"no persisting-L2 reset ({type(exc).__name__}: {exc})"
            return
        self._get.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]
        self._set.argtypes = [ctypes.c_int, ctypes.c_size_t]
        self._get_attr.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
        self._set_attr.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]

    def _limit(self) -> int | None:
        value = ctypes.c_size_t(0)
        # Fails without a current context or on a GPU without the limit: nothing to reset.
        if self._get is None or self._get(ctypes.byref(value), LIMIT_PERSISTING_L2) != 0:
            return None
        return int(value.value)

    def _window(self, stream: int) -> int:
        """The bytes of ``stream``'s access-policy window (0: none, or no such attribute)."""
        if self._get_attr is None:
            return 0
        buf = ctypes.create_string_buffer(_ATTR_BYTES)
        if self._get_attr(ctypes.c_void_p(stream), STREAM_ACCESS_POLICY_WINDOW, buf) != 0:
            return 0
        return int(ctypes.c_size_t.from_buffer(buf, ctypes.sizeof(ctypes.c_void_p)).value)

    def left_set(self, stream: int) -> list[str]:
        """What a call left set, named for its Reasons (read right after its window); nothing
        unless `reset` ran before the call."""
        if not self._armed:
            return []
        self._armed = False
        found = []
        limit = self._limit()
        if limit:
            found.append(
                f"raised the persisting-L2 limit to {limit} B (cudaLimitPersistingL2CacheSize)"
            )
        window = self._window(stream)
        if window:
            found.append(f"set a {window} B access-policy window on the harness's stream")
        if not found:
            return []
        return [
            f"{' and '.join(found)}: the harness sets the limit to 0, makes persisting lines "
            "normal and clears the window before every timed call's L2 flush, so nothing "
            "kept in L2 survives into a timed call"
        ]

    def reset(self, stream: int) -> None:
        """Before a timed call's flush: no set-aside L2, no persisting line, no window."""
        limit = self._limit()
        if limit is None:
            return
        if limit:
            self._set(LIMIT_PERSISTING_L2, 0)
        self._reset()
        self._armed = True
        if self._window(stream):
            self._set_attr(
                ctypes.c_void_p(stream),
                STREAM_ACCESS_POLICY_WINDOW,
                ctypes.create_string_buffer(_ATTR_BYTES),
            )


__all__ = ["PersistingL2"]
