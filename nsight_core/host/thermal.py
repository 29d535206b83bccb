"""Thermal guard: before each profiled run, wait (bounded) while the GPU is hot or throttling.

A hot GPU lowers its clocks, so a run measured then is slower for a reason that has
nothing to do with the kernel. The guard reads the GPU's temperature headroom (degrees
below its slowdown threshold) and its clock-event reasons through NVML. When the headroom
is at or below ``wait_c``, or a thermal slowdown reason is active, it polls until the
headroom is back to ``cont_c`` and no thermal reason is active, for at most ``timeout_s``
per wait and ``budget_s`` per call. It never changes clocks or any other device setting.

Each check is recorded (status, seconds waited, temperature, headroom, reasons) and the
`@kernel` API copies the records into the rows (`ThermalGuard`, `ThermalWaitS`,
`GpuTempC`, `ThrottleReasons`). Without NVML or a GPU the guard does nothing and every
record says ``unavailable`` with the reason.

The checks run inside the worker, between runs (`guarded_call` wraps the user's function
and acts only while a profiled run starts), so a wait never lands inside a measured range.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from nsight_core.annotation import current_run_context
from nsight_core.processes.sandbox.env import inherited

ThermalMode = Literal["auto", "manual", "off"]
GuardStatus = Literal["off", "unavailable", "ok", "waited", "timed_out", "budget_spent"]

# NVML clock-event ("throttle") reason bits, from nvml.h.
_REASON_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)
THERMAL_REASONS = frozenset({"sw_thermal_slowdown", "hw_thermal_slowdown", "hw_slowdown"})
"""Reasons that mean "too hot" (hw_slowdown also covers power brake; waiting is still right)."""
_QUIET_REASONS = frozenset({"gpu_idle"})
"""Not worth recording: an idle GPU between runs is the normal case."""


def reasons_of_mask(mask: int) -> tuple[str, ...]:
    """Names of the NVML clock-event reason bits set in ``mask``."""
    return tuple(name for bit, name in _REASON_BITS if mask & bit)


@dataclass(frozen=True)
class ThermalReading:
    """One look at the GPU: temperature, headroom to the slowdown threshold, active reasons."""

    temp_c: float | None
    headroom_c: float | None
    reasons: tuple[str, ...] = ()

    @property
    def thermal_throttled(self) -> bool:
        return bool(THERMAL_REASONS.intersection(self.reasons))


Reader = Callable[[], ThermalReading]


@dataclass(frozen=True)
class ThermalSettings:
    """The guard's parameters; picklable, so they travel to the worker with the function."""

    mode: ThermalMode = "auto"
    wait_c: float = 10.0
    """Headroom (degrees C below the slowdown threshold) at or below which a run waits."""
    cont_c: float = 20.0
    """Headroom at which a waiting run starts."""
    timeout_s: float = 180.0
    """Longest single wait."""
    budget_s: float = 300.0
    """Longest total wait in one call, so the worker's time limit is not spent cooling."""
    device: int | None = None
    """CUDA ordinal to watch; None: the worker's current device (0 unless torch says otherwise)."""
    poll_s: float = 0.5


@dataclass
class GuardRecord:
    """What one check saw and did; one JSON line per profiled (config, run)."""

    status: GuardStatus
    waited_s: float = 0.0
    temp_c: float | None = None
    """Highest temperature read during the check."""
    headroom_c: float | None = None
    """Headroom when the run was let go."""
    reasons: list[str] = field(default_factory=list)
    """Clock-event reasons seen during the check (gpu_idle left out)."""
    note: str = ""
    config_id: int | None = None
    run: int | None = None


class ThermalGuard:
    """The waiting logic, with the reader, sleep and clock injectable (tests use real ones)."""

    def __init__(
        self,
        settings: ThermalSettings,
        reader: Reader | None,
        *,
        unavailable: str = "",
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._reader = reader
        self._unavailable = unavailable or "no reader"
        self._sleep = sleep
        self._clock = clock
        self.spent_s = 0.0

    def _hot(self, r: ThermalReading) -> bool:
        return r.thermal_throttled or (
            r.headroom_c is not None and r.headroom_c <= self.settings.wait_c
        )

    def _cool(self, r: ThermalReading) -> bool:
        return not r.thermal_throttled and (
            r.headroom_c is None or r.headroom_c >= self.settings.cont_c
        )

    def check(self) -> GuardRecord:
        """Read once; if hot, poll until cool, the wait's timeout, or the call's budget."""
        if self.settings.mode == "off":
            return GuardRecord("off")
        if self._reader is None:
            return GuardRecord("unavailable", note=self._unavailable)
        try:
            r = self._reader()
        except Exception as exc:  # a driver hiccup must not fail the run
            return GuardRecord("unavailable", note=f"NVML read failed: {exc}")
        seen: dict[str, None] = dict.fromkeys(x for x in r.reasons if x not in _QUIET_REASONS)
        hottest = r.temp_c
        if not self._hot(r):
            return GuardRecord("ok", 0.0, hottest, r.headroom_c, list(seen))
        left = self.settings.budget_s - self.spent_s
        if left <= 0:
            return GuardRecord(
                "budget_spent", 0.0, hottest, r.headroom_c, list(seen),
                note=f"hot, but this call's {self.settings.budget_s:g} s cooling budget is spent",
            )  # fmt: skip
        start = self._clock()
        limit = min(self.settings.timeout_s, left)
        status: GuardStatus = "timed_out"
        while self._clock() - start < limit:
            self._sleep(min(self.settings.poll_s, max(0.0, limit - (self._clock() - start))))
            try:
                r = self._reader()
            except Exception as exc:
                waited = self._clock() - start
                self.spent_s += waited
                return GuardRecord(
                    "unavailable",
                    waited,
                    hottest,
                    None,
                    list(seen),
                    note=f"NVML read failed: {exc}",
                )
            seen.update(dict.fromkeys(x for x in r.reasons if x not in _QUIET_REASONS))
            if r.temp_c is not None and (hottest is None or r.temp_c > hottest):
                hottest = r.temp_c
            if self._cool(r):
                status = "waited"
                break
        waited = self._clock() - start
        self.spent_s += waited
        note = ""
        if status == "timed_out":
            which = "wait" if limit >= self.settings.timeout_s else "call's budget"
            note = (
                f"still hot after {waited:.1f} s (the {which} limit): headroom "
                f"{r.headroom_c if r.headroom_c is not None else '?'} C, wanted {self.settings.cont_c:g} C"
            )
        return GuardRecord(status, round(waited, 3), hottest, r.headroom_c, list(seen), note)


# --- NVML ------------------------------------------------------------------------------


def _visible_entry(ordinal: int) -> str | None:
    visible = inherited("CUDA_VISIBLE_DEVICES")  # what CUDA in this very process reads
    if visible is None:
        return None
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    return entries[ordinal] if ordinal < len(entries) else None


def _torch_uuid(ordinal: int | None) -> tuple[int, str | None]:
    """The CUDA ordinal in use and its UUID, when torch already initialized CUDA here."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return (ordinal or 0), None
    idx = torch.cuda.current_device() if ordinal is None else ordinal
    try:
        uuid = str(torch.cuda.get_device_properties(idx).uuid)
    except Exception:
        return idx, None
    return idx, uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"


def nvml_handle(device: int | None) -> tuple[Any, Any] | str:
    """``pynvml`` and its handle of the CUDA device ``device`` (None: current), or why not.

    The one place that finds a CUDA ordinal's NVML device (by UUID where torch knows it, so
    ``CUDA_VISIBLE_DEVICES`` reordering cannot pick another GPU): the thermal guard and the
    judge's clock readings (judge/gpu_state.py) both read through it."""
    try:
        import pynvml
    except ImportError:
        return "NVML unavailable: nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return f"NVML unavailable (no NVIDIA driver or GPU?): {exc}"
    ordinal, uuid = _torch_uuid(device)
    entry = uuid or _visible_entry(ordinal)
    try:
        if entry is not None and entry.startswith(("GPU-", "MIG-")):
            handle = pynvml.nvmlDeviceGetHandleByUUID(entry)
        else:
            handle = pynvml.nvmlDeviceGetHandleByIndex(int(entry) if entry is not None else ordinal)
    except Exception as exc:
        return f"NVML has no device for CUDA ordinal {ordinal} ({entry}): {exc}"
    return pynvml, handle


def clock_event_reasons(pynvml: Any, handle: Any) -> tuple[str, ...]:
    """The device's active clock-event ("throttle") reasons; none where NVML cannot say."""
    event_reasons = (
        getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    )
    try:
        return reasons_of_mask(int(event_reasons(handle)))
    except Exception:
        return ()


def nvml_reader(device: int | None) -> tuple[Reader | None, str]:
    """A reader for the CUDA device ``device`` (None: current), or None and why not."""
    found = nvml_handle(device)
    if isinstance(found, str):
        return None, found
    pynvml, handle = found
    try:
        slowdown: float | None = float(
            pynvml.nvmlDeviceGetTemperatureThreshold(
                handle, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
            )
        )
    except Exception:
        slowdown = None

    def read() -> ThermalReading:
        temp = float(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU))
        reasons = clock_event_reasons(pynvml, handle)
        headroom = None if slowdown is None else slowdown - temp
        return ThermalReading(temp, headroom, reasons)

    try:
        read()
    except Exception as exc:
        return None, f"NVML cannot read the temperature of this GPU: {exc}"
    return read, ""


# --- in the worker -----------------------------------------------------------------------

_guards: dict[ThermalSettings, ThermalGuard] = {}


def _guard_for(settings: ThermalSettings) -> ThermalGuard:
    guard = _guards.get(settings)
    if guard is None:
        reader, why = nvml_reader(settings.device) if settings.mode != "off" else (None, "")
        guard = _guards[settings] = ThermalGuard(settings, reader, unavailable=why)
    return guard


def guarded_call(
    settings: ThermalSettings, log_path: str, fn: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    """Call ``fn``; before a profiled run, check the GPU first and log what was seen.

    Used as ``functools.partial(guarded_call, settings, log_path, fn)``; warm-up calls and
    calls outside a worker are not checked.
    """
    ctx = current_run_context()
    if ctx is not None and ctx.profiling:
        rec = _guard_for(settings).check()
        rec.config_id, rec.run = ctx.config_id, ctx.run
        with open(log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(asdict(rec)) + "\n")
    return fn(*args, **kwargs)


# --- in the parent -----------------------------------------------------------------------


def read_log(path: Path) -> list[GuardRecord]:
    """The records the worker wrote; a torn last line (killed worker) is skipped."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(GuardRecord(**json.loads(line)))
        except (ValueError, TypeError):
            continue
    return out


_SEVERITY: dict[str, int] = {
    "off": 0, "unavailable": 1, "ok": 2, "waited": 3, "budget_spent": 4, "timed_out": 5,
}  # fmt: skip


@dataclass(frozen=True)
class ConfigSummary:
    """The checks before one config's runs, folded into what a row shows."""

    status: str
    waited_s: float
    temp_c: float | None
    reasons: list[str]
    notes: list[str]


def summarize(records: Sequence[GuardRecord]) -> dict[int, ConfigSummary]:
    """Per config: the worst status, total wait, hottest reading, reasons and notes."""
    by_config: dict[int, list[GuardRecord]] = {}
    for r in records:
        if r.config_id is not None:
            by_config.setdefault(r.config_id, []).append(r)
    out = {}
    for cid, recs in by_config.items():
        worst = max(recs, key=lambda r: _SEVERITY.get(r.status, 0))
        temps = [r.temp_c for r in recs if r.temp_c is not None]
        reasons = list(dict.fromkeys(x for r in recs for x in r.reasons))
        notes = list(dict.fromkeys(r.note for r in recs if r.note))
        out[cid] = ConfigSummary(
            worst.status, round(sum(r.waited_s for r in recs), 3),
            max(temps) if temps else None, reasons, notes,
        )  # fmt: skip
    return out
