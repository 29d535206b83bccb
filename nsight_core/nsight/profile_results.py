"""What a `@kernel` call returns (`ProfileResults`) and the files it writes under Nsight
Python's names.

The rows are nsight_core's `Row`s; `to_dataframe` lays them out with the config's
parameters as columns (the objects the function was called with) and the info collectors'
columns after the row's own (`nsight_core.nsight.collection` says how they aggregate).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nsight_core.nsight.collection import CollectedInfo
from nsight_core.results import Failure, ProfileResult, Row


class ProfileResults:
    """What a ``@kernel`` call returns: rows, failures, raw values, collected info and files."""

    def __init__(
        self,
        result: ProfileResult,
        param_names: Sequence[str],
        configs: Sequence[Mapping[str, Any]] | None = None,
        collected: CollectedInfo | None = None,
    ) -> None:
        self.result = result
        self._param_names = list(param_names)
        self._configs = [dict(c) for c in configs] if configs is not None else None
        self.collected = collected
        """The info collectors' values (None when the call had none)."""

    @property
    def rows(self) -> list[Row]:
        return list(self.result.rows)

    @property
    def failures(self) -> list[Failure]:
        return list(self.result.failures)

    @property
    def artifacts(self) -> dict[str, str]:
        return dict(self.result.artifacts)

    def params_of(self, row: Row) -> dict[str, Any]:
        """The config's arguments as given (tuples stay tuples), else the row's JSON form."""
        if self._configs is not None and 0 <= row.ConfigId < len(self._configs):
            config = self._configs[row.ConfigId]
            return {k: config.get(k) for k in self._param_names}
        return {k: row.Params.get(k) for k in self._param_names}

    def to_dataframe(self) -> Any:
        """One row per (annotation, config, metric); config parameters as columns.

        Columns: Annotation, <params...>, Metric, Unit, AvgValue, MedianValue, StdDev,
        MinValue, MaxValue, NumRuns, RequestedRuns, RelativeStdDevPct, CI95_Lower,
        CI95_Upper, StableMeasurement, Kernel, GPU, Backend, CacheControl, ClockControl,
        ReplayMode, Normalized, Trust, Reasons, ErrorClass, Error, ThermalGuard,
        ThermalWaitS, GpuTempC, ThrottleReasons, then the info collectors' columns.
        Parameter values are the objects the function was called with. Missing values are
        NaN and Trust/ErrorClass/Error say why; `StableMeasurement` is a nullable boolean
        (``<NA>`` where the spread is undefined: fewer than two valid runs, or a zero mean).
        """
        import pandas as pd  # lazy: pandas is the API's extra, not the engine's

        records = []
        for row in self.result.rows:
            d = row.model_dump(exclude={"RawValues", "Params", "Kernels", "IgnoredKernels"})
            extra = (
                self.collected.row_columns(row.Annotation, row.ConfigId) if self.collected else {}
            )
            records.append({"Annotation": d.pop("Annotation"), **self.params_of(row), **d, **extra})
        frame = pd.DataFrame.from_records(records)
        if "StableMeasurement" in frame:
            frame["StableMeasurement"] = frame["StableMeasurement"].astype("boolean")
        return frame

    def raw_dataframe(self) -> Any:
        """One row per (annotation, config, run, metric): the values the statistics used."""
        import pandas as pd  # lazy: pandas is the API's extra, not the engine's

        records = [
            {
                "Annotation": r.Annotation,
                **self.params_of(r),
                "Metric": r.Metric,
                "Run": i,
                "Value": v,
                "Unit": r.Unit,
                "Kernel": r.Kernel,
                "GPU": r.GPU,
                **(
                    self.collected.raw_columns(r.Annotation, r.ConfigId, i)
                    if self.collected
                    else {}
                ),
            }
            for r in self.result.rows
            for i, v in enumerate(r.RawValues)
        ]
        return pd.DataFrame.from_records(records)


def job_dir_for(prefix: str | None, func_name: str) -> Path:
    """A fresh directory for one call: in the system's temporary folder, or at ``prefix``."""
    tag = f"nspy-{func_name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    if prefix is None:
        return Path(tempfile.mkdtemp(prefix=tag + "-"))
    path = Path(f"{prefix}{tag}")
    path.mkdir(parents=True, exist_ok=False)
    return path


def _place(src: Path, dst: Path) -> None:
    """Hard-link (reports are MBs), else copy; an older file of the same name is replaced."""
    with contextlib.suppress(FileNotFoundError):
        dst.unlink()
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def write_files(
    results: ProfileResults, prefix: str | None, func_name: str, index: int, csv: bool
) -> None:
    """Nsight Python's file names beside the job directory: ``{prefix}ncu-output-{func}-{i}
    .ncu-rep`` (and ``.log``), and with ``output_csv`` ``{prefix}profiled_data-{func}-{i}.csv``
    and ``{prefix}processed_data-{func}-{i}.csv``. Without a prefix they go into the job
    directory."""
    art = results.result.artifacts
    base = f"{prefix}" if prefix is not None else str(Path(art.get("job_dir", ".")) / "")
    tag = f"{func_name}-{index}"
    for key, suffix in (("report", ".ncu-rep"), ("ncu_log", ".log")):
        if key in art and Path(art[key]).is_file():
            dst = Path(f"{base}ncu-output-{tag}{suffix}")
            _place(Path(art[key]), dst)
            art[f"nsight_{key}"] = str(dst)
    if not csv:
        return
    for name, frame in (
        ("profiled_data", results.raw_dataframe()),
        ("processed_data", results.to_dataframe()),
    ):
        path = Path(f"{base}{name}-{tag}.csv")
        path.parent.mkdir(parents=True, exist_ok=True)
        frame.to_csv(path, index=False)
        art[name] = str(path)


__all__ = ["ProfileResults", "job_dir_for", "write_files"]
