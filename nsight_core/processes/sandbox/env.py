"""The environment a sandboxed child starts with: an allowlist of the parent's, never its credentials.

Its own module because it is the one policy a reviewer checks line by line: which names pass,
which patterns are dropped even then, and which variables every child gets from us.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from pathlib import Path

ENV_ALLOW_NAMES = frozenset(
    {
        "PATH",
        "LANG",
        "LANGUAGE",
        "TZ",
        "LD_LIBRARY_PATH",
        "PYTHONPATH",
        "PYTHONHASHSEED",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "OMP_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MKL_NUM_THREADS",
        "NVTX_INJECTION64_PATH",
    }
)
"""Variables passed through by exact name: what Python, CUDA and the frameworks need."""

ENV_ALLOW_PREFIXES = (
    "LC_",
    "CUDA_",
    "NVIDIA_",
    "NV_",
    "TRITON_",
    "TORCH_",
    "TORCHINDUCTOR_",
    "CUPY_",
    "NCU_",
)
"""Variables passed through by prefix (device selection, JIT caches, profiler settings)."""

ENV_DENY_PATTERNS = (
    "*TOKEN*",
    "*KEY*",
    "*SECRET*",
    "*PASSWORD*",
    "*PASSWD*",
    "*CREDENTIAL*",
    "*AUTH*",
    "AWS_*",
)
"""Dropped even when allowed above: candidate code must never see the server's credentials."""


def build_env(
    extra: Mapping[str, str] | None = None,
    *,
    home: Path,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The child's environment: allowlisted names of ``base`` (default os.environ), then extras.

    Extras are trusted (they come from our own code) and may override anything.
    """
    source = os.environ if base is None else base
    env: dict[str, str] = {}
    for name, value in source.items():
        allowed = name in ENV_ALLOW_NAMES or name.startswith(ENV_ALLOW_PREFIXES)
        denied = any(fnmatch.fnmatchcase(name.upper(), p) for p in ENV_DENY_PATTERNS)
        if allowed and not denied:
            env[name] = value
    env.setdefault("PATH", os.defpath)
    env["HOME"] = str(home)
    env["TMPDIR"] = str(home)
    # Unbuffered so the last lines before a hang or crash reach us.
    env["PYTHONUNBUFFERED"] = "1"
    # Two processes of one job (the judge and the contestant) must not fight over the
    # CPUs with a thread pool each the size of the host: half each, unless set by the caller.
    for name in MATH_THREAD_VARS:
        env.setdefault(name, str(math_threads()))
    env.update(extra or {})
    return env


MATH_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
"""The math libraries' thread-pool sizes (torch's intra-op pool follows OMP_NUM_THREADS)."""


def child_math_threads() -> str:
    """The math threads a job's processes get: the caller's OMP_NUM_THREADS, else ours."""
    return os.environ.get("OMP_NUM_THREADS") or str(math_threads())


def math_threads() -> int:
    """Half the CPUs this process may use, at least one: a job's two processes take turns
    (the judge waits while the contestant runs a call) but both import and warm at once."""
    return max(1, usable_cpus() // 2)


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity), which the children it starts inherit."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
