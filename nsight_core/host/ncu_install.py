"""Which ncu this host has and what it is: the one owner of ncu discovery, its version and
the GPU -> ncu chip table.

The probe (what `check_environment` reports), the pipeline (which ncu profiles a job), the
metric catalogs and the recording tools all ask this module, so they cannot disagree.

Discovery policy (`discover_ncu`):

- ``$NSPY_NCU`` set (a path, or a name looked up on PATH): that ncu is used. When it does
  not resolve to an executable file, **no** ncu is used and `NcuDiscovery.problem` says why;
  there is no silent fallback to PATH, so a typo never profiles with a different ncu.
- otherwise the first ``ncu`` on PATH is used.
- every ncu found (the ``$NSPY_NCU`` one, then each PATH entry's, one per real file) is
  listed, so the probe can show the others.

The settings (``$NSPY_NCU`` and PATH) come in an `EngineConfig`, read once by whoever starts
the engine: the probe and the pipeline of one server then judge the same values.

Stdlib-only apart from `nsight_core.errors`, `nsight_core.plan.config` and
`nsight_core.processes.sandbox` (all stdlib-only): ``tools/record_catalogs.py`` uses it on
bare GPU hosts.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from typing import Literal

from nsight_core.exceptions import NCUNotAvailableError
from nsight_core.plan.config import NCU_ENV, EngineConfig
from nsight_core.processes.sandbox import run_command

VERSION_TIMEOUT_S = 30.0
"""``ncu --version`` answers in well under a second; a slow network home dir can stall it."""

LAUNCH_MODE_MIN = (2022, 4)
"""Oldest ncu we drive in launch mode (NVTX range filtering as we use it)."""
ATTACH_MODE_MIN = (2026, 2, 1)
"""Oldest ncu for attach mode, the optional fast path (same floor as newest Nsight Python)."""

NO_NCU_HINT = (
    "install Nsight Compute 2022.4 or newer (it ships with the CUDA toolkit, or from "
    "https://developer.nvidia.com/nsight-compute) and put its ncu on PATH, or point "
    f"{NCU_ENV} at it; or use backend 'events', which needs no profiler"
)

BAD_ENV_HINT = (
    f"set {NCU_ENV} to the path of an ncu executable, or unset it to use the first ncu on PATH"
)

_VERSION_RE = re.compile(r"Version\s+(\d+(?:\.\d+){1,3})")
CHIP_RE = re.compile(r"^[a-z]{2}\d{2,3}[a-z0-9]{0,3}$")
"""What an ncu chip name looks like (``gh100``, ``ga10b``, ``gb20b``)."""

Source = Literal["NSPY_NCU", "PATH"]


# --------------------------------------------------------------------------------------
# Discovery
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NcuCandidate:
    """One ncu executable found on this host."""

    path: str
    """Absolute path (symlinks not resolved)."""
    source: Source


@dataclass(frozen=True)
class NcuDiscovery:
    """Every ncu found, the one used, and why none is used when none is."""

    candidates: tuple[NcuCandidate, ...]
    """The ``$NSPY_NCU`` one first, then each PATH entry's in order; one per real file."""
    used: str | None
    """Path of the ncu nsight_core runs; None when there is none or ``$NSPY_NCU`` is broken."""
    problem: str | None
    """Why ``used`` is None (None when an ncu is used)."""
    hint: str = ""
    """What to do about ``problem``."""

    def require(self) -> str:
        """The ncu to run; raises `NCUNotAvailableError` (PROFILER_ERROR) saying why there is
        none, by a type callers can tell apart without reading its words."""
        if self.used is None:
            raise NCUNotAvailableError(self.problem or "no ncu found", self.hint)
        return self.used


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _resolve_env(wanted: str, path_var: str) -> tuple[str | None, str]:
    """(absolute path, '') for ``$NSPY_NCU``'s value, or (None, why it is unusable)."""
    if os.sep in wanted:
        path = os.path.expanduser(wanted)
        if _executable(path):
            return os.path.abspath(path), ""
        what = "does not exist" if not os.path.exists(path) else "is not an executable file"
        return None, f"{NCU_ENV}={wanted!r} {what}"
    found = shutil.which(wanted, path=path_var)
    if found is None:
        return None, f"{NCU_ENV}={wanted!r} is not an executable found on PATH"
    return os.path.abspath(found), ""


def discover_ncu(config: EngineConfig) -> NcuDiscovery:
    """Apply the discovery policy (module docstring) to ``config``'s ncu and PATH."""
    path_var = config.path
    candidates: list[NcuCandidate] = []
    seen: set[str] = set()
    wanted = config.ncu.strip()
    env_path, env_problem = _resolve_env(wanted, path_var) if wanted else (None, "")
    if env_path is not None:
        candidates.append(NcuCandidate(env_path, "NSPY_NCU"))
        seen.add(os.path.realpath(env_path))
    for d in path_var.split(os.pathsep):
        p = os.path.join(d or ".", "ncu")
        if _executable(p) and os.path.realpath(p) not in seen:
            seen.add(os.path.realpath(p))
            candidates.append(NcuCandidate(os.path.abspath(p), "PATH"))
    if env_problem:
        return NcuDiscovery(tuple(candidates), None, env_problem, BAD_ENV_HINT)
    if candidates:
        return NcuDiscovery(tuple(candidates), candidates[0].path, None)
    return NcuDiscovery((), None, f"no ncu on PATH and {NCU_ENV} is not set", NO_NCU_HINT)


def find_ncu(config: EngineConfig) -> str | None:
    """The ncu to use under the discovery policy, or None (`discover_ncu` says why)."""
    return discover_ncu(config).used


def require_ncu(config: EngineConfig) -> str:
    """The ncu to use; raises `NCUNotAvailableError` (PROFILER_ERROR) with the probe's reason."""
    return discover_ncu(config).require()


# --------------------------------------------------------------------------------------
# Version
# --------------------------------------------------------------------------------------


def parse_ncu_version(text: str) -> str | None:
    """``ncu --version`` text ('Version 2025.3.1.0 (build ...)') -> '2025.3.1.0', or None."""
    m = _VERSION_RE.search(text)
    return m.group(1) if m else None


def version_tuple(version: str | None) -> tuple[int, ...]:
    """'2025.3.1.0' -> (2025, 3, 1, 0); () when unparsable."""
    if not version:
        return ()
    return tuple(int(p) for p in re.findall(r"\d+", version))


def query_ncu_version(ncu: str) -> tuple[str | None, str | None]:
    """(version, None) from a bounded ``ncu --version``, or (None, why it gave none)."""
    r = run_command([ncu, "--version"], VERSION_TIMEOUT_S)
    if r.exit_code == 0:
        version = parse_ncu_version(r.stdout.text() + "\n" + r.stderr.text())
        if version is not None:
            return version, None
    if r.exit_code is None:
        return None, r.message.splitlines()[0] if r.message else "`ncu --version` failed"
    return None, f"`ncu --version` gave no version (exit {r.exit_code})"


def ncu_version(ncu: str) -> str | None:
    """The version of the ncu at ``ncu``; None if it fails or prints none."""
    return query_ncu_version(ncu)[0]


# --------------------------------------------------------------------------------------
# Chips
# --------------------------------------------------------------------------------------

_NAME_HINTS: tuple[tuple[str, str], ...] = (
    # (regex over the product name, ncu chip); first match wins, so specific before general.
    (r"\bG?H(100|200|800|20)\b", "gh100"),
    (r"\bG?B(200|100)\b", "gb100"),
    (r"\bRTX (PRO )?50[89]0|\bRTX PRO 6000 Blackwell", "gb202"),
    (r"\bA(100|800|30)\b", "ga100"),
    (r"\bL40S?\b|\bRTX 4090\b|\bRTX 6000 Ada", "ad102"),
    (r"\bL4\b", "ad104"),
    (r"\bA(10|40|6000)\b|\bRTX A6000\b|\bRTX 30[89]0", "ga102"),
    (r"\bT4\b", "tu104"),
    (r"\bV100\b", "gv100"),
)

_CC_DEFAULT: dict[str, str] = {
    # compute capability -> the ncu chip of that architecture's largest part
    "7.0": "gv100",
    "7.5": "tu102",
    "8.0": "ga100",
    "8.6": "ga102",
    "8.7": "ga10b",
    "8.9": "ad102",
    "9.0": "gh100",
    "10.0": "gb100",
    "12.0": "gb202",
}

DEFAULT_CHIP = "gh100"
"""Chip assumed when none is given and no GPU is visible (the project's H200 test host)."""


def chip_for_gpu(name: str | None, compute_capability: str | None) -> str | None:
    """The ncu chip name of a GPU: from its product name when it is telling, else from its
    compute capability (the architecture's largest part), else None.

    H100 and H200 are both ``gh100``; an A100 is ``ga100``; an RTX 4090 is ``ad102``.
    """
    for pattern, chip in _NAME_HINTS:
        if name and re.search(pattern, name, re.IGNORECASE):
            return chip
    return _CC_DEFAULT.get(compute_capability or "")


def table_chips() -> frozenset[str]:
    """Every chip the GPU table above can name."""
    return frozenset(_CC_DEFAULT.values()) | {c for _, c in _NAME_HINTS}


def parse_list_chips(text: str) -> list[str]:
    """``ncu --list-chips`` text -> sorted chip names (``ga100``, ``gh100``...).

    ncu prints the names separated by commas and/or whitespace, possibly after a header
    line; anything that does not look like a chip name is ignored.
    """
    chips = {tok.lower() for tok in re.split(r"[\s,;]+", text) if CHIP_RE.match(tok.lower())}
    return sorted(chips)
