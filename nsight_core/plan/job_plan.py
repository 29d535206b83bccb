"""A request resolved once into everything its job's stages and processes read.

Settings, backend, timer, confinement, transport, GPU, directories, environment and time
limits are decided here, from the request and the `EngineConfig`, and nowhere else: the
pipeline starts the processes from a `JobPlan`, the judge reads the part written into
``job.json`` (`JobPlan.job_spec`), and a pre-started judge is matched by the plan's
`LaunchSpec` and environment. Before, each stage derived its own copy of the settings
(five sites), and two processes enforced the time limit from differently built objects.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from platformdirs import user_cache_dir

from nsight_core.collectors import get_backend
from nsight_core.collectors.base import Backend
from nsight_core.plan.config import EngineConfig
from nsight_core.processes.launch import CONTESTANT_ENV_PREFIX
from nsight_core.processes.sandbox import default_memory_limit, landlock_abi
from nsight_core.protocol import JobSpec, LaunchSpec
from nsight_core.request import ProfileRequest, request_workdir
from nsight_core.runtime.callable_spec import ResolvedSpec, resolve_spec
from nsight_core.settings import JobSettings

JUDGE_GRACE_S = 30.0
"""The judge outlives its contestant's limit by this much, to report how it ended."""

INLINE_SOURCE = "inline_source.py"
"""Where a request's inline ``source`` is written in its job directory."""
INLINE_REFERENCE = "inline_reference.py"
"""Where a request's inline ``reference_source`` is written in its job directory."""


@dataclass(frozen=True)
class JobPlan:
    """One request job, resolved: what every later stage and process reads."""

    request: ProfileRequest
    settings: JobSettings
    """The request's measurement settings, with the GPU the scheduler gave the job."""
    backend: Backend
    launch: LaunchSpec
    """What shapes the contestant's command; with `env`, the key of a pre-started judge."""
    confine: Literal["on", "off"]
    job_dir: Path
    workdir: Path
    """Where relative names resolve and the candidates run (the request's, else the cwd)."""
    callables: dict[str, ResolvedSpec]
    """The reference, the input maker and the candidates, each spec resolved against the
    workdir once: what the judge and the contestant import."""
    source_file: Path | None
    """The inline ``source`` written into the job directory (`write_source`), if any."""
    reference_source_file: Path | None
    """The inline ``reference_source``, written likewise, if any."""
    env: dict[str, str]
    """Added to the allow-listed environment of the job's processes (`job_env`)."""
    contestant_limit_s: float
    """The job's time limit, enforced on the contestant by the judge."""
    judge_limit_s: float
    """The judge's own limit, enforced by the server: the contestant's plus a grace."""
    memory_bytes: int
    """Resident memory of the job's processes together (0: no limit)."""

    def job_spec(self) -> JobSpec:
        """What the judge reads from ``job.json``."""
        return JobSpec(
            mode="request",
            backend=self.backend.name,
            request=self.request,
            workdir=str(self.workdir),
            source_file=str(self.source_file) if self.source_file else None,
            reference_source_file=(
                str(self.reference_source_file) if self.reference_source_file else None
            ),
            callables=self.callables,
            confine=self.confine,
            launch=self.launch,
            settings=self.settings.wire(),
            time_limit_s=self.contestant_limit_s,
        )

    def write_source(self) -> None:
        """Write the request's inline sources where the plan says (before the job runs)."""
        if self.source_file is not None and self.request.source is not None:
            self.source_file.write_text(self.request.source, encoding="utf-8")
        ref = self.request.reference_source
        if self.reference_source_file is not None and ref is not None:
            self.reference_source_file.write_text(ref, encoding="utf-8")


def plan_job(
    request: ProfileRequest, job_dir: Path, config: EngineConfig, *, gpu: str | None = None
) -> JobPlan:
    """Resolve ``request`` for a job in ``job_dir`` on ``gpu`` (None: the server's own).

    Raises NsightCoreError (invalid_request) for a configured value that cannot be used (a
    memory limit that is no size), naming the variable that holds it."""
    settings = dataclasses.replace(JobSettings.of_request(request), gpu=gpu)
    backend = get_backend(request.backend)
    limit = settings.time_limit_s
    workdir = request_workdir(request)
    return JobPlan(
        request=request,
        settings=settings,
        backend=backend,
        launch=settings.launch(cuda_ipc=config.cuda_ipc),
        confine=confinement(config),
        job_dir=job_dir,
        workdir=workdir,
        callables={
            spec: resolve_spec(spec, workdir)
            for spec in dict.fromkeys([request.reference, request.inputs, *request.candidates])
        },
        source_file=job_dir / INLINE_SOURCE if request.source is not None else None,
        reference_source_file=(
            job_dir / INLINE_REFERENCE if request.reference_source is not None else None
        ),
        env=job_env(gpu, config),
        contestant_limit_s=limit,
        judge_limit_s=limit + JUDGE_GRACE_S,
        memory_bytes=default_memory_limit(config.job_memory),
    )


def confinement(config: EngineConfig) -> Literal["on", "off"]:
    """Whether contestants are confined: as configured, else wherever the kernel has
    Landlock, under every backend alike. The contestant creates its CUDA context before it
    confines itself (CUDA's first initialisation opens files no allow-list can name in
    advance; once it is up, kernels, IPC and JIT caches work confined: docs/correctness.md)."""
    if config.confine != "auto":
        return config.confine
    return "on" if landlock_abi() > 0 else "off"


def job_env(gpu: str | None, config: EngineConfig) -> dict[str, str]:
    """The environment a job's processes get on top of the allowlist: this package on
    PYTHONPATH, the JIT caches and the GPU (a standby's key holds it: standby.py)."""
    package_root = str(Path(__file__).resolve().parents[2])
    pythonpath = os.pathsep.join(p for p in (package_root, config.pythonpath) if p)
    return {"PYTHONPATH": pythonpath, **jit_cache_env(config), **gpu_env(gpu)}


def gpu_env(gpu: str | None) -> dict[str, str]:
    """The job sees only its GPU; a UUID names it whatever CUDA's device order is."""
    return {} if gpu is None else {"CUDA_VISIBLE_DEVICES": gpu}


def jit_cache_env(config: EngineConfig) -> dict[str, str]:
    """Persistent JIT caches for jobs, whose HOME is a fresh private directory.

    Without them every job would recompile its Triton kernels, its `load_inline` extensions
    (a minute each) and re-JIT its PTX. Contestants share one set (a caller's own settings win); the judge, which
    computes every expected output, gets caches of its own that no contestant can write,
    so a candidate that plants a compiled kernel under the reference's cache key cannot
    change an expected output in a later job (docs/correctness.md).
    """
    base = Path(user_cache_dir("nspy-mcp"))
    env = {}
    own = dict(config.jit_caches)
    caches = (("TRITON_CACHE_DIR", "triton"), ("CUDA_CACHE_PATH", "cuda"))
    for var, sub in (*caches, ("TORCH_EXTENSIONS_DIR", "torch_extensions")):
        shared = own.get(var) or str(base / sub)
        env[CONTESTANT_ENV_PREFIX + var] = shared
        env[var] = str(base / "judge" / sub)
        # Made now: a confined contestant may write beneath them but create nothing above.
        for d in (shared, env[var]):
            Path(d).mkdir(parents=True, exist_ok=True)
    return env
