"""The environment report `check_environment` answers with, as pydantic models, one per section.

The models are the contract read by the server, the CLI and the demo; they live apart from
the code that fills them so a reader of a report (a cached one, or one sent over the wire)
does not need the probing.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GpuProcess(_Model):
    pid: int = Field(description="Process id of a process holding a context on this GPU.")
    used_memory_mib: int | None = Field(None, description="GPU memory it uses, MiB, if known.")
    name: str | None = Field(None, description="Process name, when readable by this user.")


class GpuInfo(_Model):
    index: int = Field(description="NVML / nvidia-smi index.")
    name: str = Field(description="Product name, e.g. 'NVIDIA H200'.")
    uuid: str | None = Field(None, description="GPU UUID.")
    compute_capability: str | None = Field(None, description="e.g. '9.0'.")
    chip: str | None = Field(None, description="ncu chip name inferred from it, e.g. 'gh100'.")
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    sm_clock_mhz: int | None = Field(None, description="Current SM clock.")
    mem_clock_mhz: int | None = Field(None, description="Current memory clock.")
    temperature_c: int | None = None
    processes: list[GpuProcess] = Field(
        default_factory=list, description="Compute processes on this GPU now (a busy GPU is noisy)."
    )
    stream_bytes_per_s: float | None = Field(
        None,
        description="Measured streaming bandwidth (deep=true calibrates; docs/environment.md).",
    )
    dense_bf16_flops: float | None = Field(None, description="Measured dense bf16 FLOP/s.")
    datasheet_bytes_per_s: float | None = Field(None, description="NVIDIA's datasheet value.")
    busy: bool = Field(
        False,
        description="Other processes use it: noisier timings; the queue prefers an idle GPU.",
    )


class NcuInstall(_Model):
    path: str = Field(description="Absolute path of this ncu.")
    source: Literal["NSPY_NCU", "PATH"] = Field(description="Where it was found.")
    version: str | None = Field(None, description="From `ncu --version`, e.g. '2025.3.1.0'.")
    error: str | None = Field(None, description="Why the version could not be read.")
    used: bool = Field(
        description="The one jobs run: NSPY_NCU's, else the first on PATH (see ncu_problem)."
    )
    launch_mode_ok: bool = Field(description="Version >= 2022.4: usable in launch mode.")
    attach_mode_ok: bool = Field(description="Version >= 2026.2.1: usable in attach mode.")


class PackageStatus(_Model):
    name: str = Field(description="Distribution name.")
    installed: bool
    version: str | None = None
    compatible: bool | None = Field(
        None, description="Fits this ncu / driver; null when that cannot be told here."
    )
    note: str = Field("", description="Why it is or is not compatible.")


class CounterAccess(_Model):
    rm_profiling_admin_only: int | None = Field(
        None,
        description="The driver's RmProfilingAdminOnly (1: admins only); null: unreadable.",
    )
    is_admin: bool = Field(description="This process runs as root.")
    deep_test: Literal["not_run", "passed", "permission_denied", "failed", "skipped"] = Field(
        "not_run", description="Outcome of the one-kernel ncu test (deep=True)."
    )
    detail: str = Field("", description="What the test or the params file showed.")

    def denied(self) -> bool:
        """Counters are closed to this user: ncu's one-kernel test was refused, or the driver
        keeps them for administrators, this process is none and no test read them. One rule
        for the ncu backend's verdict and for a request that names it (request_defaults)."""
        if self.deep_test == "permission_denied":
            return True
        return (
            self.rm_profiling_admin_only == 1 and not self.is_admin and self.deep_test != "passed"
        )


class FrameworkStatus(_Model):
    name: Literal["torch", "triton", "cupy", "numpy"]
    installed: bool
    version: str | None = None


class BackendStatus(_Model):
    name: Literal["ncu", "cupti", "events"]
    available: bool
    reason: str = Field(description="Why it works, or what is missing.")


class SandboxStatus(_Model):
    """Which process controls jobs run under here (docs/sandbox.md)."""

    parent_death: str = Field(description="How a job dies with the server.")
    descendants: str = Field(
        description="How processes that left the job's group are found at its end."
    )
    memory_limit_bytes: int = Field(description="Default resident-memory limit of a job; 0: none.")
    memory_limit_source: str = Field(
        description="Where the limit comes from (NSPY_MCP_JOB_MEMORY)."
    )
    landlock_abi: int = Field(
        description="Landlock ABI of the kernel; 0: no file system allow-list possible."
    )
    server_protected: bool = Field(
        description="This process's /proc environ is closed to same-user processes."
    )


class CanaryCheck(_Model):
    """One backend's canary job."""

    # Filled by the server and the CLI (`nspy_mcp.canaries`) for a deep check: the probe
    # itself never runs candidate code. `tools/list` checks this part by type only (the
    # server validates it), so its fields cost an agent's context nothing.
    ok: bool | None = Field(
        description="Every hack caught, the control passed; null: the job did not run."
    )
    caught: int = Field(description="Hacks that got their expected verdict.")
    total: int = Field(description="Hacks in the set (the honest control is not one of them).")
    missed: list[str] = Field(
        default_factory=list, description="'name: what was seen' for each hack not caught."
    )
    control: str = Field(
        "", description="The honest control's outcome: 'passed, Trust ok', or what was seen."
    )
    wall_s: float | None = Field(None, description="Wall time of the job; null when not run.")
    note: str = Field("", description="Why the job did not run here, or what failed in it.")


class EnvironmentReport(_Model):
    host: str
    platform: str = Field(description="e.g. 'Linux-6.8-x86_64'.")
    python: str = Field(description="Version and executable.")
    probed_at: float = Field(description="Unix time of the probe.")
    deep: bool = Field(description="The one-kernel ncu test was tried.")
    driver_version: str | None = Field(None, description="e.g. '580.159.04'.")
    cuda_driver_version: str | None = Field(None, description="CUDA the driver supports.")
    gpu_source: Literal["nvml", "nvidia-smi", "none"]
    gpus: list[GpuInfo]
    gpu_error: str | None = Field(None, description="Why no GPU could be listed.")
    ncu: list[NcuInstall] = Field(description="Every ncu found; the used one first.")
    ncu_used: str | None = Field(None, description="The ncu jobs run.")
    ncu_problem: str | None = Field(
        None,
        description="Why no ncu is used; ncu jobs are refused with these words.",
    )
    ncu_report: PackageStatus
    cupti_python: PackageStatus
    counters: CounterAccess
    frameworks: list[FrameworkStatus]
    backends: list[BackendStatus]
    remediation: list[str] = Field(description="What to do about each problem.")
    sandbox: SandboxStatus | None = Field(None, description="Process controls for jobs.")
    canaries: dict[str, CanaryCheck] | None = Field(
        None,
        description="deep=true: each backend's canary job (docs/environment.md).",
    )

    def backend(self, name: str) -> BackendStatus:
        """The status of one backend."""
        return next(b for b in self.backends if b.name == name)
