"""The environment a sandboxed child starts with: an allowlist of the parent's, never its credentials.

Its own module because it is the one policy a reviewer checks line by line: which names pass,
which patterns are dropped even then, and which variables every child gets from us.

It is also the one engine module outside `nsight_core.plan.config` that reads the process's
environment (the CLI is the third: three modules read it, not the two that "configuration at
the edge" asked for). The reads here are not user settings but the other side of the policy
above: what a process we started finds in the environment we gave it (its job marker and
pipe, its private HOME and TMPDIR, the PYTHONPATH and caches its Landlock rules must keep
readable, its contestant's variables, the GPU CUDA shows it), and what this process hands on
to its own children. Such a process starts from ``exec`` with nothing but its argv and
environment, before any configuration object could reach it, so it reads them where it
starts, through the functions below (`inherited` and its kin); user settings come from
`EngineConfig`.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping, Sequence
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


def inherited(name: str) -> str | None:
    """What whoever started this process put in ``name`` (None: nothing)."""
    return os.environ.get(name)


def take_inherited(name: str) -> str:
    """``name``'s value ('' if unset), removed from this process's environment, so that
    nothing it starts later is told of it."""
    return os.environ.pop(name, "")


def inherited_with_prefix(prefix: str) -> dict[str, str]:
    """The variables named ``prefix``X, as X: values meant for a process this one starts."""
    n = len(prefix)
    return {k[n:]: v for k, v in os.environ.items() if k.startswith(prefix)}


def inherited_paths(names: Sequence[str]) -> list[str]:
    """The non-empty values of ``names``, in order (directories this process was given)."""
    return [value for name in names if (value := os.environ.get(name))]


def inherited_pythonpath() -> list[str]:
    """This process's PYTHONPATH entries that are absolute paths."""
    raw = os.environ.get("PYTHONPATH", "")
    return [p for p in raw.split(os.pathsep) if os.path.isabs(p)]


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
