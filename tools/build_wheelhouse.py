#!/usr/bin/env python3
"""Build an offline wheelhouse of nspy-mcp's runtime dependencies for another machine.

    python tools/build_wheelhouse.py .whl --python-version 3.12 \\
        --platform manylinux_2_28_x86_64 --extra cupti --only-missing

1. Requirements come from pyproject.toml ``[project.dependencies]`` plus the chosen extras.
   The ``cupti`` extra is narrowed to ``--cupti-spec`` (default ``cupti-python==13.0.*``:
   13.0.x is the line known to work on CUDA 13.0 drivers; use ``==12.8.0`` for CUDA 12).
2. ``pip download --only-binary=:all: --python-version X --implementation cp --platform ...``
   resolves and fetches wheels for the target (the given manylinux tag and every older
   manylinux tag of that architecture, so pure and older wheels qualify too).
3. Duplicates are removed: one version per package, the newest.
4. With ``--skip-present FILE`` (``pip freeze`` or one name a line) or ``--only-missing``
   (the package list of the project's GPU host image, see `HOST_PRESENT`), wheels of
   packages the host already has are dropped, except `ALWAYS_KEEP`.

It prints each wheel kept with its size and the total, and fails when the total exceeds
``--max-mib`` (default 60: the GPU host's transfer limit is 64 MiB for everything).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HOST_PRESENT = frozenset(
    # Python packages of the project's H200 host image ('cuda'), as listed in the device
    # notes on 2026-11-17: only names; versions are checked by pip at install time.
    """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs
    botorch build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy
    coverage cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython
    diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools formulaic
    frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize
    hypothesis idna imageio interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib
    jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities
    linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl
    meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind
    narwhals networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti
    nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile
    nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py
    nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime
    onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
    orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker
    prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
    pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock
    pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich
    sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn
    sentencepiece sentence-transformers setuptools shellingham simplejson six
    sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server
    tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio
    torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton
    typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt
    xarray xxhash yarl zipp""".split()  # noqa: SIM905 (a word list reads better here)
)

ALWAYS_KEEP = frozenset({"typing-extensions"})
"""Kept even when present: pydantic needs a recent one, and an old host copy breaks it."""


def run_group(cmd: list[str], timeout_s: float, what: str) -> bool:
    """Run ``cmd`` in its own session; on timeout SIGKILL its whole process group."""
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        sys.stderr.write(f"error: {what} took longer than {timeout_s:g} s; killed\n")
        return False
    if rc != 0:
        sys.stderr.write(f"error: {what} failed (exit {rc})\n")
    return rc == 0


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(extras: list[str], cupti_spec: str) -> list[str]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(meta["dependencies"])
    optional = meta.get("optional-dependencies", {})
    for extra in extras:
        if extra not in optional:
            raise SystemExit(f"unknown extra {extra!r}; pyproject has {sorted(optional)}")
        for req in optional[extra]:
            reqs.append(cupti_spec if normalize(req).startswith("cupti-python") else req)
    return reqs


def platform_tags(platform: str) -> list[str]:
    """The given tag plus every older manylinux tag of its architecture."""
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", platform)
    if not m:
        return [platform]
    major, minor, arch = int(m.group(1)), int(m.group(2)), m.group(3)
    tags = [f"manylinux_{major}_{n}_{arch}" for n in range(minor, 16, -1)]
    return [*tags, f"manylinux2014_{arch}", f"manylinux2010_{arch}", f"manylinux1_{arch}"]


def wheel_name_version(path: Path) -> tuple[str, tuple[int | str, ...]]:
    name, version = path.name.split("-")[:2]
    parts: list[int | str] = [int(p) if p.isdigit() else p for p in re.split(r"[.+]", version)]
    return normalize(name), tuple(parts)


def dedup(out: Path) -> list[Path]:
    """Keep the newest wheel of each package; return the removed ones."""
    best: dict[str, tuple[tuple[int | str, ...], Path]] = {}
    removed = []
    for whl in sorted(out.glob("*.whl")):
        name, version = wheel_name_version(whl)
        prev = best.get(name)
        if prev is None:
            best[name] = (version, whl)
            continue
        try:
            newer = version > prev[0]
        except TypeError:  # '1.0rc1' vs '1.0.1': compare as text
            newer = str(version) > str(prev[0])
        loser = prev[1] if newer else whl
        if newer:
            best[name] = (version, whl)
        loser.unlink()
        removed.append(loser)
    return removed


def present_names(skip_file: str | None, only_missing: bool) -> set[str]:
    names: set[str] = set(HOST_PRESENT) if only_missing else set()
    if skip_file:
        for line in Path(skip_file).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                names.add(normalize(re.split(r"[=<>~!@ ;\[]", line, maxsplit=1)[0]))
    return {normalize(n) for n in names} - ALWAYS_KEEP


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="wheelhouse directory (e.g. .whl, git-ignored)")
    ap.add_argument("--python-version", default="3.12", help="target Python, e.g. 3.12")
    ap.add_argument("--platform", default="manylinux_2_28_x86_64", help="target platform tag")
    ap.add_argument("--extra", action="append", default=[], help="pyproject extra, e.g. cupti")
    ap.add_argument(
        "--cupti-spec",
        default="cupti-python==13.0.*",
        help="requirement used for the cupti extra (12.8.0 for CUDA 12 drivers)",
    )
    ap.add_argument(
        "--skip-present",
        metavar="FILE",
        help="drop packages listed in FILE (pip freeze output or one name a line)",
    )
    ap.add_argument(
        "--only-missing",
        action="store_true",
        help="drop packages the project's GPU host image already has",
    )
    ap.add_argument("--include-self", action="store_true", help="also build nspy-mcp's wheel")
    ap.add_argument("--max-mib", type=float, default=60.0, help="fail above this total size")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds for pip download")
    args = ap.parse_args(argv)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    reqs = requirements(args.extra, args.cupti_spec)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--only-binary=:all:",
        "--dest",
        str(out),
        "--python-version",
        args.python_version,
        "--implementation",
        "cp",
        "--disable-pip-version-check",
        "--quiet",
    ]
    for tag in platform_tags(args.platform):
        cmd += ["--platform", tag]
    cmd += reqs
    sys.stdout.write(
        f"pip download for cp{args.python_version} {args.platform}: {' '.join(reqs)}\n"
    )
    if not run_group(cmd, args.timeout, "pip download"):
        return 1
    if args.include_self and not run_group(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--quiet",
            "--wheel-dir",
            str(out),
            str(ROOT),
        ],
        args.timeout,
        "pip wheel",
    ):
        return 1
    removed = dedup(out)
    skip = present_names(args.skip_present, args.only_missing)
    dropped = []
    for whl in sorted(out.glob("*.whl")):
        if wheel_name_version(whl)[0] in skip:
            whl.unlink()
            dropped.append(whl.name)
    kept = sorted(out.glob("*.whl"))
    total = sum(w.stat().st_size for w in kept)
    for w in kept:
        sys.stdout.write(f"  {w.stat().st_size / 2**20:7.2f} MiB  {w.name}\n")
    if removed:
        sys.stdout.write(f"removed older duplicates: {', '.join(p.name for p in removed)}\n")
    if dropped:
        sys.stdout.write(
            f"dropped {len(dropped)} already on the host: "
            f"{', '.join(sorted({normalize(d.split('-')[0]) for d in dropped}))}\n"
        )
    sys.stdout.write(f"{len(kept)} wheels, {total / 2**20:.2f} MiB in {out}\n")
    if total > args.max_mib * 2**20:
        sys.stderr.write(f"error: wheelhouse is {total / 2**20:.1f} MiB > {args.max_mib} MiB\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
