"""The engine's settings from the environment, read once by whoever starts the engine.

The MCP server and CLI (and the `@kernel` API for its own jobs) call `EngineConfig.from_env`
once and pass the object down; no other module of the engine reads an ``NSPY_MCP_*``
variable. A setting read at call time in ten places meant that one job could see two values
of it, and that a test had to patch the process's environment to change one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # only for the annotation: this module runs without pydantic (tools/)
    from nsight_core.host.report import EnvironmentReport

CONFINE_ENV = "NSPY_MCP_CONFINE"
"""'1' confines every contestant's file access (Landlock), '0' none; unset: wherever the
kernel has Landlock."""
TRANSPORT_ENV = "NSPY_MCP_TRANSPORT"
"""'host' makes CUDA arrays cross between judge and contestant through host memory instead
of CUDA IPC (for hosts where IPC is unavailable; the judge also falls back by itself)."""
STANDBY_ENV = "NSPY_MCP_STANDBY"
"""'0' turns pre-started judges off; anything else (or unset) leaves them on."""
AT_START_ENV = "NSPY_MCP_STANDBY_AT_START"
"""'0': a server does not start the remembered settings' standbys when it starts."""
IDLE_ENV = "NSPY_MCP_STANDBY_IDLE_S"
"""Seconds a standby may wait for a job before it is retired."""
MEMORY_ENV = "NSPY_MCP_JOB_MEMORY"
"""A job's resident-memory limit (8G, 40%, 0 for none); unset: half the RAM."""
STORE_ENV = "NSPY_MCP_STORE"
"""The result store's root; unset: the user data directory's ``nspy-mcp/results``."""
MAX_RESULTS_ENV = "NSPY_MCP_STORE_MAX_RESULTS"
MAX_AGE_DAYS_ENV = "NSPY_MCP_STORE_MAX_AGE_DAYS"
EXECUTOR_ENV = "NSPY_MCP_EXECUTOR"
"""`local` (the default) or `dask://HOST:PORT`, as `serve --executor` takes it."""
LOCK_DIR_ENV = "NSPY_MCP_LOCK_DIR"
"""Where the per-device lock files live; unset: a per-user directory under the temp dir."""
NCU_ENV = "NSPY_NCU"
"""The ncu executable to use (a path or a name on PATH); unset: the first ncu on PATH."""
CACHE_DIR_ENV = "NSPY_CACHE_DIR"
"""The per-user cache directory (probe reports, live catalogs); unset: the platform's."""
VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"
"""The GPUs the server shares out, as CUDA reads the variable (docs/cluster.md)."""

JIT_CACHE_VARS = ("TRITON_CACHE_DIR", "CUDA_CACHE_PATH", "TORCH_EXTENSIONS_DIR")
"""The JIT caches a job's processes keep between jobs (plan/job_plan.jit_cache_env)."""

DEFAULT_IDLE_S = 600.0
STANDBY_MARGIN_S = 15.0
"""A standby this close to its idle limit is retired rather than handed a job; an idle
limit must leave room for two of these."""


@dataclass(frozen=True)
class EngineConfig:
    """Host-wide settings of the engine (a request's own settings are in its request)."""

    confine: Literal["auto", "on", "off"] = "auto"
    """'auto' confines contestants wherever the kernel has Landlock (pipeline.py)."""
    cuda_ipc: bool = True
    standby: bool = True
    standby_at_start: bool = True
    standby_idle_s: float = DEFAULT_IDLE_S
    job_memory: str | None = None
    """The memory limit as written (the sandbox parses it, and a bad value fails the job
    that uses it with a message naming the variable)."""
    store_root: Path | None = None
    store_max_results: str | None = None
    """As written; the store parses both limits (``0``/``none`` turns one off)."""
    store_max_age_days: str | None = None
    pythonpath: str = ""
    """The server's PYTHONPATH, which its jobs' processes get after this package."""
    jit_caches: tuple[tuple[str, str], ...] = ()
    """The caller's own JIT cache directories (`JIT_CACHE_VARS`), which contestants use instead
    of the shared defaults (plan/job_plan.jit_cache_env)."""
    profile_backend: str | None = None
    """The backend of a staged request's profile stage instead of the request's (ncu): for
    hosts without ncu (tests, CI). Set in code only; no variable sets it."""
    executor: str = ""
    """Where a server's jobs run when its command names none (`EXECUTOR_ENV`): read here, so
    a server built in code and one started by the CLI agree."""
    lock_dir: Path | None = None
    """The device locks' directory (`LOCK_DIR_ENV`): servers that share it share the GPUs
    one job at a time; None: the per-user default (nspy_mcp/devices.py)."""
    ncu: str = ""
    """`NCU_ENV` as written; discovery (host/ncu_install.py) judges it, so that a typo is
    reported rather than silently replaced by the ncu on PATH."""
    path: str = field(default_factory=lambda: os.environ.get("PATH", os.defpath))
    """The PATH ncu is looked up on: the probe and the pipeline must find the same one.
    A config built in code (a library caller's, a default executor's) takes this process's
    PATH, so it finds the ncu a shell here would, as discovery did before it took a config."""
    visible_devices: str | None = None
    """`VISIBLE_ENV` of the server's process (None: unset, every GPU): the slots it shares
    out, and part of the probe cache's key."""
    cache_dir: Path | None = None
    """`CACHE_DIR_ENV`; None: the platform's user cache directory (`cache_root`)."""
    environment: EnvironmentReport | None = field(default=None, hash=False)
    """The report `probe_environment` answers with instead of probing: for tests that need a
    host this one is not (counters denied, where no GPU is), so that `check_environment`, a
    request's resolution and the preflights all see the same host. Set in code only; no
    variable sets it."""

    def cache_root(self) -> Path:
        """Where nspy-mcp keeps what it learnt of this host (probe results, catalogs,
        calibrated ceilings)."""
        if self.cache_dir is not None:
            return self.cache_dir
        import platformdirs  # lazy: only when NSPY_CACHE_DIR is not set

        return Path(platformdirs.user_cache_dir("nspy-mcp", appauthor=False))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> EngineConfig:
        """The settings in ``environ`` (default ``os.environ``); unset or empty keeps a default."""
        env = os.environ if environ is None else environ

        def get(name: str) -> str | None:
            value = env.get(name, "").strip()
            return value or None

        confine = get(CONFINE_ENV)
        store = get(STORE_ENV)
        return cls(
            confine="on" if confine == "1" else "off" if confine == "0" else "auto",
            cuda_ipc=get(TRANSPORT_ENV) != "host",
            standby=get(STANDBY_ENV) != "0",
            standby_at_start=get(AT_START_ENV) != "0",
            standby_idle_s=_idle_s(get(IDLE_ENV)),
            job_memory=get(MEMORY_ENV),
            store_root=Path(store).expanduser() if store else None,
            store_max_results=env.get(MAX_RESULTS_ENV),
            store_max_age_days=env.get(MAX_AGE_DAYS_ENV),
            pythonpath=env.get("PYTHONPATH", ""),
            jit_caches=tuple((v, env[v]) for v in JIT_CACHE_VARS if env.get(v)),
            executor=env.get(EXECUTOR_ENV, "").strip(),
            lock_dir=Path(lock) if (lock := get(LOCK_DIR_ENV)) else None,
            ncu=env.get(NCU_ENV, "").strip(),
            path=env.get("PATH", os.defpath),
            visible_devices=env.get(VISIBLE_ENV),
            cache_dir=Path(cache) if (cache := env.get(CACHE_DIR_ENV)) else None,
        )

    @property
    def prestart(self) -> bool:
        """Start the remembered settings' standbys when a server starts."""
        return self.standby and self.standby_at_start


def _idle_s(raw: str | None) -> float:
    """A usable idle limit: a number above two margins, else the default."""
    try:
        value = float(raw) if raw else DEFAULT_IDLE_S
    except ValueError:
        return DEFAULT_IDLE_S
    return value if value > 2 * STANDBY_MARGIN_S else DEFAULT_IDLE_S
