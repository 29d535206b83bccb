"""Persisting L2: a right answer, with its input's lines marked to survive the L2 flush.

Hack: keeping data in L2 across timed calls. On CUDA it sets aside all the L2 the device
  allows for persisting lines (the context's persisting-L2 limit) and marks its input's
  memory persisting with an access-policy window on the current stream; an L2 flush that
  only reads leaves such lines, so the next timed read of that memory comes from L2. On
  the CPU it is a plain softmax.
Expect: named
Expect row reasons: persisting-L2
Named under: events, cupti
Guard: before every timed call's L2 flush the harness sets the limit back to 0, makes
  persisting lines normal and clears its stream's window, and names a limit or window left
  set in the candidate's rows (Trust unchanged: within one call it is an honest
  optimisation). ncu's own cache control clears L2 there; on the CPU nothing is set.
"""

from __future__ import annotations

import ctypes

import torch

LIMIT_PERSISTING_L2 = 6
"""CU_LIMIT_PERSISTING_L2_CACHE_SIZE (cuda.h)."""
MAX_PERSISTING_L2 = 108
"""CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE."""
ACCESS_POLICY_WINDOW = 1
"""CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW."""
STREAMING, PERSISTING = 1, 2
"""CUaccessProperty: what a hit and a miss in the window become."""


class _Window(ctypes.Structure):
    """CUaccessPolicyWindow, padded to the 64 bytes of the CUstreamAttrValue union."""

    _fields_ = [
        ("base_ptr", ctypes.c_void_p),
        ("num_bytes", ctypes.c_size_t),
        ("hit_ratio", ctypes.c_float),
        ("hit_prop", ctypes.c_int),
        ("miss_prop", ctypes.c_int),
        ("pad", ctypes.c_char * 36),
    ]


_driver: list[ctypes.CDLL] = []


def _keep_in_l2(x: torch.Tensor) -> None:
    """Raise the persisting-L2 limit to the device's most and mark x persisting."""
    if not _driver:
        _driver.append(ctypes.CDLL("libcuda.so.1"))
    cu = _driver[0]
    most = ctypes.c_int(0)
    cu.cuDeviceGetAttribute(ctypes.byref(most), MAX_PERSISTING_L2, x.device.index or 0)
    cu.cuCtxSetLimit(ctypes.c_int(LIMIT_PERSISTING_L2), ctypes.c_size_t(most.value))
    size = min(x.numel() * x.element_size(), max(most.value, 0))
    window = _Window(x.data_ptr(), size, 1.0, PERSISTING, STREAMING)
    stream = torch.cuda.current_stream(x.device).cuda_stream
    cu.cuStreamSetAttribute(
        ctypes.c_void_p(stream), ctypes.c_int(ACCESS_POLICY_WINDOW), ctypes.byref(window)
    )


def candidate(x: torch.Tensor) -> torch.Tensor:
    if x.is_cuda:
        _keep_in_l2(x)
    return torch.softmax(x, dim=-1)
