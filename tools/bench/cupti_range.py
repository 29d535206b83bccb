"""CUPTI's range profiler through ctypes on libcupti: ``gpu__time_duration.sum`` per range,
measured by the same counters ncu reads, inside the process that runs the kernels.

Why ctypes: cupti-python 13.0.x and 13.2.0 wrap only CUPTI's Activity and Callback APIs;
13.3 and 13.4 add ``cupti.profiler_host`` (the host half: config images, metric evaluation)
and PM sampling, but not the target half (``cuptiRangeProfiler*``: enable, set the config,
start, stop, decode), and they require nvidia-cuda-cupti of their own minor version.
libcupti itself (the nvidia-cuda-cupti wheel every cupti-python depends on) exports both
halves since CUDA 12.6, so this module declares their parameter structs from CUPTI 13.0's
``cupti_target.h``, ``cupti_profiler_target.h``, ``cupti_profiler_host.h`` and
``cupti_range_profiler.h`` and calls them directly.

Flow (CUPTI's range profiling guide): ``cuptiProfilerInitialize``; the chip name and the
counter availability image of the current context; a host object that turns the metric list
into a config image; ``cuptiRangeProfilerEnable`` on the context; a counter data image; one
``SetConfig``; then per measured call: initialize the counter data image, ``Start``, the
call, synchronize, ``Stop``, ``DecodeData``, and each range's name and value
(``EvaluateToGpuValues``).

Two range modes:

- ``auto``: ``CUPTI_AutoRange`` + ``CUPTI_KernelReplay``: every kernel launched between
  Start and Stop is its own range (ncu's unit: one result per kernel);
- ``user``: ``CUPTI_UserRange`` + ``CUPTI_UserReplay``: one range pushed around the call
  (its kernels and the gaps between them, as ncu's range replay measures a range).

A one-pass metric such as ``gpu__time_duration.sum`` needs no replay, so every call runs once.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import importlib.util
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

_size_t = ctypes.c_size_t
_void_p = ctypes.c_void_p
_char_p = ctypes.c_char_p
_u8 = ctypes.c_uint8
_u16 = ctypes.c_uint16
_u32 = ctypes.c_uint32
_int = ctypes.c_int  # C enums

PROFILER_TYPE_RANGE_PROFILER = 0  # CUpti_ProfilerType
AUTO_RANGE, USER_RANGE = 1, 2  # CUpti_ProfilerRange
KERNEL_REPLAY, USER_REPLAY = 2, 3  # CUpti_ProfilerReplayMode
MODES = {"auto": (AUTO_RANGE, KERNEL_REPLAY), "user": (USER_RANGE, USER_REPLAY)}


class _Params(ctypes.Structure):
    """A CUPTI parameter struct: ``structSize`` is offsetof(last field) + its size, as
    CUPTI_PROFILER_STRUCT_SIZE computes it (so a newer libcupti knows which fields we set)."""

    _fields_: ClassVar[list[tuple[str, Any]]] = []

    @classmethod
    def struct_size(cls) -> int:
        name, ftype = cls._fields_[-1][:2]
        return int(getattr(cls, name).offset) + ctypes.sizeof(ftype)

    @classmethod
    def make(cls, **fields: Any) -> Any:
        p = cls()
        p.structSize = cls.struct_size()
        for key, value in fields.items():
            setattr(p, key, value)
        return p


_HEAD = [("structSize", _size_t), ("pPriv", _void_p)]


class ProfilerInitialize(_Params):
    _fields_: ClassVar[list[tuple[str, Any]]] = [*_HEAD]


class DeviceGetChipName(_Params):
    _fields_: ClassVar[list[tuple[str, Any]]] = [
        *_HEAD, ("deviceIndex", _size_t), ("pChipName", _char_p),
    ]  # fmt: skip


class GetCounterAvailability(_Params):
    _fields_: ClassVar[list[tuple[str, Any]]] = [
        *_HEAD, ("ctx", _void_p), ("counterAvailabilityImageSize", _size_t),
        ("pCounterAvailabilityImage", _void_p),
    ]  # fmt: skip


class HostInitialize(_Params):
    _fields_: ClassVar[list[tuple[str, Any]]] = [
        *_HEAD, ("profilerType", _int), ("pChipName", _char_p),
        ("pCounterAvailabilityImage", _void_p), ("pHostObject", _void_p),
    ]  # fmt: skip


class HostDeinitialize(_Params):
    _fields_: ClassVar[list[tuple[str, Any]]] = [*_HEAD, ("pHostObject", _void_p)]


class HostConfigAddMetrics(_Params):
    _fields_: ClassVar[list[tuple[str, Any]]] = [
        *_HEAD, ("pHostObject", _void_p), ("ppMetricNames", ctypes.POINTER(_char_p)),
        ("numMetrics", _size_t),
    ]  # fmt: skip


class HostGetConfigImageSize(_Params):
    _fields_: ClassVar[list[tuple[str, Any]]] = [
        *_HEAD, ("pHostObject", _void_p), ("configImageSize", _size_t),
    ]  # fmt: skip


class HostGetConfigImage(_Params):
    _fields_: ClassVar[list[tuple[str, Any]]] = [
        *_HEAD, ("pHostObject", _void_p), ("configImageSize", _size_t),
        ("pConfigImage", _void_p),
    ]  # fmt: skip


class HostGetNumOfPasses(_Params):
    _fields_: ClassVar[list[tuple[str, Any]]] = [
        *_HEAD, ("configImageSize", _size_t), ("pConfigImage", _void_p),
        ("numOfPasses", _size_t),
    ]  # fmt: skip


class HostEvaluateToGpuValues(_Params):
    _fields_: ClassVar[list[tuple[str, Any]]] = [
        *_HEAD, ("pHostObject", _void_p), ("pCounterDataImage", _void_p),
        ("counterDataImageSize", _size_t), ("rangeIndex", _size_t),
        ("ppMetricNames", ctypes.POINTER(_char_p)), ("numMetrics", _size_t),
        ("pMetricValues", ctypes.POINTER(ctypes.c_double)),
    ]  # fmt: skip


class RangeEnable(_Params):
    _fields_: ClassVar[list[tuple[str, Any]]] = [
        *_HEAD, ("ctx", _void_p), ("pRangeProfilerObject", _void_p),
    ]  # fmt: skip


class RangeObjectOnly(_Params):
    """Disable, Start and PopRange take only the object."""

    _fields_: ClassVar[list[tuple[str, Any]]] = [*_HEAD, ("pRangeProfilerObject", _void_p)]


class RangeGetCounterDataSize(_Params):
    _fields_: ClassVar[list[tuple[str, Any]]] = [
        *_HEAD, ("pRangeProfilerObject", _void_p), ("pMetricNames", ctypes.POINTER(_char_p)),
        ("numMetrics", _size_t), ("maxNumOfRanges", _size_t), ("maxNumRangeTreeNodes", _u32),
        ("counterDataSize", _size_t),
    ]  # fmt: skip


class RangeCounterDataImageInitialize(_Params):
    _fields_: ClassVar[list[tuple[str, Any]]] = [
        *_HEAD, ("pRangeProfilerObject", _void_p), ("counterDataSize", _size_t),
        ("pCounterData", _void_p),
    ]  # fmt: skip


class RangeSetConfig(_Params):
    _fields_: ClassVar[list[tuple[str, Any]]] = [
        *_HEAD, ("pRangeProfilerObject", _void_p), ("configSize", _size_t),
        ("pConfig", _void_p), ("counterDataImageSize", _size_t), ("pCounterDataImage", _void_p),
        ("range", _int), ("replayMode", _int), ("maxRangesPerPass", _size_t),
        ("numNestingLevels", _u16), ("minNestingLevel", _u16), ("passIndex", _size_t),
        ("targetNestingLevel", _u16),
    ]  # fmt: skip


class RangeStop(_Params):
    _fields_: ClassVar[list[tuple[str, Any]]] = [
        *_HEAD, ("pRangeProfilerObject", _void_p), ("passIndex", _size_t),
        ("targetNestingLevel", _size_t), ("isAllPassSubmitted", _u8),
    ]  # fmt: skip


class RangePushRange(_Params):
    _fields_: ClassVar[list[tuple[str, Any]]] = [
        *_HEAD, ("pRangeProfilerObject", _void_p), ("pRangeName", _char_p),
    ]  # fmt: skip


class RangeDecodeData(_Params):
    _fields_: ClassVar[list[tuple[str, Any]]] = [
        *_HEAD, ("pRangeProfilerObject", _void_p), ("numOfRangeDropped", _size_t),
    ]  # fmt: skip


class RangeGetCounterDataInfo(_Params):
    _fields_: ClassVar[list[tuple[str, Any]]] = [
        *_HEAD, ("pCounterDataImage", _void_p), ("counterDataImageSize", _size_t),
        ("numTotalRanges", _size_t),
    ]  # fmt: skip


class RangeGetRangeInfo(_Params):
    _fields_: ClassVar[list[tuple[str, Any]]] = [
        *_HEAD, ("pCounterDataImage", _void_p), ("counterDataImageSize", _size_t),
        ("rangeIndex", _size_t), ("rangeDelimiter", _char_p), ("rangeName", _char_p),
    ]  # fmt: skip


STRUCTS: dict[str, type[_Params]] = {
    "CUpti_Profiler_Initialize_Params": ProfilerInitialize,
    "CUpti_Device_GetChipName_Params": DeviceGetChipName,
    "CUpti_Profiler_GetCounterAvailability_Params": GetCounterAvailability,
    "CUpti_Profiler_Host_Initialize_Params": HostInitialize,
    "CUpti_Profiler_Host_Deinitialize_Params": HostDeinitialize,
    "CUpti_Profiler_Host_ConfigAddMetrics_Params": HostConfigAddMetrics,
    "CUpti_Profiler_Host_GetConfigImageSize_Params": HostGetConfigImageSize,
    "CUpti_Profiler_Host_GetConfigImage_Params": HostGetConfigImage,
    "CUpti_Profiler_Host_GetNumOfPasses_Params": HostGetNumOfPasses,
    "CUpti_Profiler_Host_EvaluateToGpuValues_Params": HostEvaluateToGpuValues,
    "CUpti_RangeProfiler_Enable_Params": RangeEnable,
    "CUpti_RangeProfiler_Disable_Params": RangeObjectOnly,
    "CUpti_RangeProfiler_GetCounterDataSize_Params": RangeGetCounterDataSize,
    "CUpti_RangeProfiler_CounterDataImage_Initialize_Params": RangeCounterDataImageInitialize,
    "CUpti_RangeProfiler_SetConfig_Params": RangeSetConfig,
    "CUpti_RangeProfiler_Stop_Params": RangeStop,
    "CUpti_RangeProfiler_PushRange_Params": RangePushRange,
    "CUpti_RangeProfiler_DecodeData_Params": RangeDecodeData,
    "CUpti_RangeProfiler_GetCounterDataInfo_Params": RangeGetCounterDataInfo,
    "CUpti_RangeProfiler_CounterData_GetRangeInfo_Params": RangeGetRangeInfo,
}
"""Each C struct (CUPTI 13.0 headers) and its declaration here; STRUCT_SIZES holds the
``*_STRUCT_SIZE`` values the headers give on x86-64, which the tests compare."""

STRUCT_SIZES = {
    "CUpti_Profiler_Initialize_Params": 16,
    "CUpti_Device_GetChipName_Params": 32,
    "CUpti_Profiler_GetCounterAvailability_Params": 40,
    "CUpti_Profiler_Host_Initialize_Params": 48,
    "CUpti_Profiler_Host_Deinitialize_Params": 24,
    "CUpti_Profiler_Host_ConfigAddMetrics_Params": 40,
    "CUpti_Profiler_Host_GetConfigImageSize_Params": 32,
    "CUpti_Profiler_Host_GetConfigImage_Params": 40,
    "CUpti_Profiler_Host_GetNumOfPasses_Params": 40,
    "CUpti_Profiler_Host_EvaluateToGpuValues_Params": 72,
    "CUpti_RangeProfiler_Enable_Params": 32,
    "CUpti_RangeProfiler_Disable_Params": 24,
    "CUpti_RangeProfiler_GetCounterDataSize_Params": 64,
    "CUpti_RangeProfiler_CounterDataImage_Initialize_Params": 40,
    "CUpti_RangeProfiler_SetConfig_Params": 90,
    "CUpti_RangeProfiler_Stop_Params": 41,
    "CUpti_RangeProfiler_PushRange_Params": 32,
    "CUpti_RangeProfiler_DecodeData_Params": 32,
    "CUpti_RangeProfiler_GetCounterDataInfo_Params": 40,
    "CUpti_RangeProfiler_CounterData_GetRangeInfo_Params": 56,
}


class CuptiCallError(RuntimeError):
    """A CUPTI call that returned an error: the function and CUPTI's own result string."""


def libcupti_candidates() -> list[str]:
    """Where libcupti may be, most specific first: ``$NSPY_LIBCUPTI``, the nvidia-cuda-cupti
    wheel (cu13, then CUDA 12's layout), ``$CUDA_HOME``'s extras, the loader's search path."""
    found = [os.environ["NSPY_LIBCUPTI"]] if os.environ.get("NSPY_LIBCUPTI") else []
    spec = importlib.util.find_spec("nvidia")  # the namespace package of NVIDIA's wheels
    roots = list(spec.submodule_search_locations or []) if spec else []
    for root in roots:
        for sub in ("cu13/lib", "cuda_cupti/lib"):
            found += sorted(glob.glob(os.path.join(root, sub, "libcupti.so*")), reverse=True)
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    found += sorted(glob.glob(os.path.join(cuda_home, "extras/CUPTI/lib64/libcupti.so*")))
    name = ctypes.util.find_library("cupti")
    if name:
        found.append(name)
    return found


def load_libcupti() -> tuple[ctypes.CDLL, str]:
    """libcupti (with libnvperf_host from its directory loaded first, which it opens by
    name), and the path it came from."""
    errors: list[str] = []
    for path in libcupti_candidates():
        try:
            host = os.path.join(os.path.dirname(path), "libnvperf_host.so")
            if os.path.exists(host):
                ctypes.CDLL(host, mode=ctypes.RTLD_GLOBAL)
            return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL), path
        except OSError as exc:
            errors.append(f"{path}: {exc}")
    raise OSError("libcupti not found or not loadable: " + ("; ".join(errors) or "no candidate"))


def current_context() -> int:
    """The calling thread's current CUDA context (torch made it), from libcuda."""
    cuda = ctypes.CDLL("libcuda.so.1")
    ctx = _void_p()
    rc = cuda.cuCtxGetCurrent(ctypes.byref(ctx))
    if rc != 0 or not ctx.value:
        raise RuntimeError(f"cuCtxGetCurrent returned {rc} and context {ctx.value}")
    return int(ctx.value)


@dataclass
class RangeValue:
    """One decoded range: its name (a kernel's name under ``auto``, else ours) and value."""

    name: str
    value: float


def call(lib: ctypes.CDLL, fn: str, params: Any) -> None:
    """Call a CUPTI function on its parameter struct; raise with CUPTI's result string."""
    rc = int(getattr(lib, fn)(ctypes.byref(params)))
    if rc != 0:
        text = _char_p()
        lib.cuptiGetResultString(rc, ctypes.byref(text))
        raise CuptiCallError(f"{fn} returned {rc} ({(text.value or b'?').decode()})")


class HostConfig:
    """The host half (no GPU needed): a profiler host object for one chip and one metric,
    its config image and pass count, and the metric's value of a decoded range."""

    def __init__(self, lib: ctypes.CDLL, chip: str, metric: str, availability: int = 0):
        self.lib = lib
        self.metric = (_char_p * 1)(metric.encode())
        host = HostInitialize.make(
            profilerType=PROFILER_TYPE_RANGE_PROFILER,
            pChipName=chip.encode(),
            pCounterAvailabilityImage=availability or None,
        )
        call(lib, "cuptiProfilerHostInitialize", host)
        self.host: int | None = int(host.pHostObject)
        call(
            lib,
            "cuptiProfilerHostConfigAddMetrics",
            HostConfigAddMetrics.make(
                pHostObject=self.host, ppMetricNames=self.metric, numMetrics=1
            ),
        )
        size = HostGetConfigImageSize.make(pHostObject=self.host)
        call(lib, "cuptiProfilerHostGetConfigImageSize", size)
        self.config = (_u8 * size.configImageSize)()
        call(
            lib,
            "cuptiProfilerHostGetConfigImage",
            HostGetConfigImage.make(
                pHostObject=self.host,
                configImageSize=size.configImageSize,
                pConfigImage=ctypes.addressof(self.config),
            ),
        )
        passes = HostGetNumOfPasses.make(
            configImageSize=len(self.config), pConfigImage=ctypes.addressof(self.config)
        )
        call(lib, "cuptiProfilerHostGetNumOfPasses", passes)
        self.passes = int(passes.numOfPasses)

    def evaluate(self, data: ctypes.Array[ctypes.c_uint8], index: int) -> float:
        """The metric's value in range ``index`` of a decoded counter data image."""
        value = (ctypes.c_double * 1)()
        call(
            self.lib,
            "cuptiProfilerHostEvaluateToGpuValues",
            HostEvaluateToGpuValues.make(
                pHostObject=self.host, pCounterDataImage=ctypes.addressof(data),
                counterDataImageSize=len(data), rangeIndex=index, ppMetricNames=self.metric,
                numMetrics=1, pMetricValues=value,
            ),
        )  # fmt: skip
        return float(value[0])

    def close(self) -> None:
        if self.host is not None:
            host, self.host = self.host, None
            self.lib.cuptiProfilerHostDeinitialize(
                ctypes.byref(HostDeinitialize.make(pHostObject=host))
            )


class RangeProfiler:
    """One metric per range on the current context, ranges as `MODES` names them."""

    def __init__(self, metric: str, mode: str, device_index: int, max_ranges: int = 16):
        self.lib, self.lib_path = load_libcupti()
        self.mode = mode
        self.max_ranges = max_ranges
        self._obj: int | None = None
        self.ctx = current_context()
        self._call("cuptiProfilerInitialize", ProfilerInitialize.make())
        chip = DeviceGetChipName.make(deviceIndex=device_index)
        self._call("cuptiDeviceGetChipName", chip)
        self.chip = (chip.pChipName or b"").decode()
        avail = GetCounterAvailability.make(ctx=self.ctx)
        self._call("cuptiProfilerGetCounterAvailability", avail)
        self._avail = (_u8 * avail.counterAvailabilityImageSize)()
        avail.pCounterAvailabilityImage = ctypes.addressof(self._avail)
        self._call("cuptiProfilerGetCounterAvailability", avail)
        self.host = HostConfig(self.lib, self.chip, metric, ctypes.addressof(self._avail))
        self.passes = self.host.passes
        enable = RangeEnable.make(ctx=self.ctx)
        self._call("cuptiRangeProfilerEnable", enable)
        self._obj = int(enable.pRangeProfilerObject)
        data_size = RangeGetCounterDataSize.make(
            pRangeProfilerObject=self._obj,
            pMetricNames=self.host.metric,
            numMetrics=1,
            maxNumOfRanges=max_ranges,
            maxNumRangeTreeNodes=max_ranges,
        )
        self._call("cuptiRangeProfilerGetCounterDataSize", data_size)
        self._data = (_u8 * data_size.counterDataSize)()
        self._init_data()
        self.reconfigured = 0
        """How many Starts needed the config set again first (see `start`)."""
        self._set_config()

    def _call(self, fn: str, params: Any) -> None:
        call(self.lib, fn, params)

    def _set_config(self) -> None:
        range_mode, replay = MODES[self.mode]
        self._call(
            "cuptiRangeProfilerSetConfig",
            RangeSetConfig.make(
                pRangeProfilerObject=self._obj,
                configSize=len(self.host.config),
                pConfig=ctypes.addressof(self.host.config),
                counterDataImageSize=len(self._data),
                pCounterDataImage=ctypes.addressof(self._data),
                range=range_mode,
                replayMode=replay,
                maxRangesPerPass=self.max_ranges,
                numNestingLevels=1,
                minNestingLevel=1,
                passIndex=0,
                targetNestingLevel=1,
            ),
        )

    def _init_data(self) -> None:
        self._call(
            "cuptiRangeProfilerCounterDataImageInitialize",
            RangeCounterDataImageInitialize.make(
                pRangeProfilerObject=self._obj,
                counterDataSize=len(self._data),
                pCounterData=ctypes.addressof(self._data),
            ),
        )

    def start(self, name: str = "call") -> None:
        """Open a measured call (after the counter data image is reset)."""
        self._init_data()
        start = RangeObjectOnly.make(pRangeProfilerObject=self._obj)
        try:
            self._call("cuptiRangeProfilerStart", start)
        except CuptiCallError:
            # The config is set once, as NVIDIA's samples do; should this CUPTI want it set
            # again for a re-initialized counter data image, set it and count that.
            self._set_config()
            self._call("cuptiRangeProfilerStart", start)
            self.reconfigured += 1
        if self.mode == "user":
            self._name = _char_p(name.encode())
            self._call(
                "cuptiRangeProfilerPushRange",
                RangePushRange.make(pRangeProfilerObject=self._obj, pRangeName=self._name),
            )

    def stop(self) -> tuple[list[RangeValue], int]:
        """Close the call (the caller synchronized first): its ranges, and how many CUPTI
        dropped; under user replay, raises when the metric needed more than the one pass
        made (the caller would have to repeat the call)."""
        if self.mode == "user":
            self._call(
                "cuptiRangeProfilerPopRange", RangeObjectOnly.make(pRangeProfilerObject=self._obj)
            )
        stop = RangeStop.make(pRangeProfilerObject=self._obj)
        self._call("cuptiRangeProfilerStop", stop)
        if self.mode == "user" and not stop.isAllPassSubmitted:  # kernel replay replays itself
            raise RuntimeError(f"the metric needs {self.passes} passes; this run made one")
        decode = RangeDecodeData.make(pRangeProfilerObject=self._obj)
        self._call("cuptiRangeProfilerDecodeData", decode)
        return self.ranges(), int(decode.numOfRangeDropped)

    def ranges(self) -> list[RangeValue]:
        """Every range in the counter data image, in order, with the metric's value."""
        addr, size = ctypes.addressof(self._data), len(self._data)
        info = RangeGetCounterDataInfo.make(pCounterDataImage=addr, counterDataImageSize=size)
        self._call("cuptiRangeProfilerGetCounterDataInfo", info)
        out: list[RangeValue] = []
        for i in range(int(info.numTotalRanges)):
            name = RangeGetRangeInfo.make(
                pCounterDataImage=addr, counterDataImageSize=size, rangeIndex=i,
                rangeDelimiter=b"/",
            )  # fmt: skip
            self._call("cuptiRangeProfilerCounterDataGetRangeInfo", name)
            text = (name.rangeName or b"").decode(errors="replace")
            out.append(RangeValue(text, self.host.evaluate(self._data, i)))
        return out

    def close(self) -> None:
        """Disable the range profiler and free the host object (errors ignored: at exit)."""
        if self._obj is not None:
            obj, self._obj = self._obj, None
            self.lib.cuptiRangeProfilerDisable(
                ctypes.byref(RangeObjectOnly.make(pRangeProfilerObject=obj))
            )
        self.host.close()


def struct_sizes(structs: Sequence[str] = tuple(STRUCTS)) -> dict[str, int]:
    """``struct_size()`` of each declaration here, by its C name."""
    return {name: STRUCTS[name].struct_size() for name in structs}
