"""The `@kernel` API's thermal guard: Nsight Python's ``thermal_*`` parameters checked, the
guard wrapped around the function for the worker, and what it saw copied into the rows.

The guard itself (NVML readings, waits, the log) is `nsight_core.host.thermal`'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nsight_core.exceptions import ThermalControlError
from nsight_core.host.thermal import ThermalSettings, nvml_reader, read_log, summarize
from nsight_core.results import ProfileResult

THERMAL_MODES = ("auto", "manual", "off")


def thermal_settings(
    mode: str,
    wait: float | None,
    cont: float | None,
    timeout: float | None,
    device: int | None,
    time_limit_s: float,
) -> ThermalSettings:
    """Validate Nsight Python's thermal_* parameters (it checks only cont > wait)."""
    if mode not in THERMAL_MODES:
        raise ValueError(
            f"Invalid thermal_mode {mode!r}. Expected {' or '.join(map(repr, THERMAL_MODES))}."
        )
    base = ThermalSettings()
    w = base.wait_c if wait is None else float(wait)
    c = base.cont_c if cont is None else float(cont)
    if c <= w:
        raise ValueError(
            f"Invalid thermal control parameters: thermal_cont ({c:g}°C) must be greater "
            f"than thermal_wait ({w:g}°C), so that a paused run resumes only once the GPU "
            "has cooled past the pause point."
        )
    t = base.timeout_s if timeout is None else float(timeout)
    if t <= 0:
        raise ValueError(f"thermal_timeout must be positive, got {timeout!r}")
    if device is not None and (not isinstance(device, int) or device < 0):
        raise ValueError(f"thermal_device must be a CUDA ordinal (int >= 0), got {device!r}")
    # Half the worker's time limit at most goes to cooling, so the job is not killed for it.
    return ThermalSettings(
        mode=mode,  # type: ignore[arg-type]
        wait_c=w,
        cont_c=c,
        timeout_s=t,
        budget_s=min(max(t, 1.0) * 3, time_limit_s / 2),
        device=device,
    )


def require_nvml(thermal: ThermalSettings) -> None:
    """``thermal_mode='manual'`` refuses to run without NVML (auto records 'unavailable')."""
    reader, why = nvml_reader(thermal.device)
    if reader is None:
        raise ThermalControlError(
            f"thermal_mode='manual' needs NVML: {why}",
            "use thermal_mode='auto' (records 'unavailable' and goes on) or 'off'",
        )


def apply_thermal(result: ProfileResult, thermal: ThermalSettings, log: Path) -> None:
    """Copy what the guard saw into each row of the config it guarded."""
    if thermal.mode == "off":
        result.rows = [r.model_copy(update={"ThermalGuard": "off"}) for r in result.rows]
        return
    by_config = summarize(read_log(log))
    if log.is_file():
        result.artifacts["thermal_log"] = str(log)
    notes = list(dict.fromkeys(n for s in by_config.values() for n in s.notes))
    if notes:
        result.message += "; thermal guard: " + "; ".join(notes[:3])
    rows = []
    for row in result.rows:
        s = by_config.get(row.ConfigId)
        if s is None:
            rows.append(row)
            continue
        update: dict[str, Any] = {
            "ThermalGuard": s.status,
            "ThermalWaitS": s.waited_s,
            "GpuTempC": s.temp_c,
            "ThrottleReasons": s.reasons,
        }
        if s.status in ("timed_out", "budget_spent"):
            update["Reasons"] = [*row.Reasons, *(f"thermal guard: {n}" for n in s.notes)]
            if row.Trust in ("ok", "noisy"):
                update["Trust"] = "suspicious"
        rows.append(row.model_copy(update=update))
    result.rows = rows


__all__ = ["THERMAL_MODES", "apply_thermal", "require_nvml", "thermal_settings"]
