"""Run Nsight Python's own tests against nsight_core, as a compatibility yardstick.

    python tools/nsight_python_tests.py PATH [PATH ...] [-k EXPR] [--timeout-s S] [-v]

PATH is a test directory or file of a checkout of NVIDIA/nsight-python that you fetched
yourself (its files are not part of this repository), for instance its ``tests`` and
``examples`` at the commit the project's notes name::

    git --git-dir=NSIGHT_PYTHON_GIT archive HEAD tests examples | tar -x -C DIR

The tests import ``nsight``; this tool writes a tiny ``nsight`` package into a temporary
directory that makes ``nsight`` and every ``nsight.<module>`` the very same module objects
as ``nsight_core.<module>`` (else ``nsight_core.nsight.<module>``: ``info_collector``,
``experimental``), maps the two internal hooks Nsight's collector tests call
(``nsight.collection.core``) onto our collector session, puts it first on PYTHONPATH (so
the workers that run the decorated functions see it too), runs pytest from a scratch
directory and prints pass, fail, error and skip counts per file, then each failing test
with the first line of its message. docs/compat.md says which failures are deliberate
differences, and why.

Exit status: 0 when pytest ran (whatever the outcomes), 2 when it could not run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SHIM = '''"""nsight -> nsight_core, written by tools/nsight_python_tests.py (not Nsight Python)."""

import importlib
import importlib.abc
import importlib.util
import sys

import nsight_core

INTERNALS = {"nsight.collection": "_nsight_internals", "nsight.collection.core": "_nsight_internals"}
"""Nsight Python's internal modules that its collector tests call, mapped to an adapter."""


def _real(fullname):
    """nsight.X is nsight_core.X, else nsight_core.nsight.X (info_collector, experimental)."""
    if fullname in INTERNALS:
        return INTERNALS[fullname]
    tail = fullname[len("nsight."):]
    for real in ("nsight_core." + tail, "nsight_core.nsight." + tail):
        if real in sys.modules or importlib.util.find_spec(real) is not None:
            return real
    return None


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolve nsight.X to the already imported module: one module, two names."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("nsight.") or _real(fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        module = importlib.import_module(_real(spec.name))
        self._spec = module.__spec__
        return module

    def exec_module(self, module):
        module.__spec__ = self._spec  # keep the module's own spec


sys.meta_path.insert(0, _Alias())
sys.modules[__name__] = nsight_core
'''

INTERNALS = '''"""Nsight Python's internal test hooks (``nsight.collection.core``) on nsight_core's parts.

Written by tools/nsight_python_tests.py. ``run_profile_session`` runs the loop the worker
runs (configs, then runs, each a profiled run) in this process with no profiler, so that the
collectors' scopes are what is tested; ``_save_collected_info`` is our file writer.
"""

import functools
import sys
from pathlib import Path

from nsight_core.annotation import RunContext, set_run_context
from nsight_core.nsight.collection import CallCollectors, collecting_call
from nsight_core.nsight.info_collector import normalize_collectors
from nsight_core.nsight.info_collector import save_collected_info as _save_collected_info


def run_profile_session(func, configs, runs, *args, info_collectors_list=None,
                        output_prefix="", **kwargs):
    gathered = CallCollectors(
        normalize_collectors(info_collectors_list), Path(f"{output_prefix}collected_info.pkl"), runs
    )
    bound = [tuple(c) for c in configs]
    gathered.start(bound)
    spec = gathered.worker()
    call = functools.partial(collecting_call, spec, func) if spec is not None else func
    try:
        for cid, config in enumerate(bound):
            for run in range(runs):
                set_run_context(RunContext(config_id=cid, run=run, profiling=True, nvtx=False))
                call(*config)
    finally:
        set_run_context(None)
    return gathered.finish()


core = sys.modules[__name__]  # ``from nsight.collection import core``
'''


def _write_shim(where: Path) -> Path:
    pkg = where / "nsight"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(SHIM)
    (where / "_nsight_internals.py").write_text(INTERNALS)
    return where


def _outcomes(junit: Path, file: str) -> list[tuple[str, str, str, str]]:
    """(file, test, outcome, first line of the message) for every case of one file's run."""
    out = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                message = _first_reason(child.get("message") or "", child.text or "")
                break
        # A file that fails to import is one "collection failure" case, named oddly.
        collection = any(c.get("message") == "collection failure" for c in case)
        name = "<import>" if collection else case.get("name") or "?"
        out.append((file, name, outcome, message))
    return out


def _first_reason(message: str, text: str) -> str:
    """The exception line of pytest's report ("E   Error: ..."), else the message's first line;
    a collection error's message is only "collection failure"."""
    errors = [ln[1:].strip() for ln in text.splitlines() if ln.startswith("E ")]
    reason = errors[-1] if errors else (message.strip() or text.strip())
    return reason.splitlines()[0][:600] if reason else ""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path, help="Nsight Python test dirs or files")
    parser.add_argument("-k", dest="expr", help="pytest -k expression")
    parser.add_argument("--timeout-s", type=float, default=3600.0, help="wall limit for pytest")
    parser.add_argument("-v", "--verbose", action="store_true", help="list every test")
    args = parser.parse_args(argv)
    paths = [p.resolve() for p in args.paths]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        sys.stderr.write(f"not found: {', '.join(missing)}\n")
        return 2
    files = sorted({f for p in paths for f in ([p] if p.is_file() else p.glob("test_*.py"))})
    rows: list[tuple[str, str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="nsight-shim-") as tmp:
        shim = _write_shim(Path(tmp) / "shim")
        scratch = Path(tmp) / "run"
        scratch.mkdir()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(shim), str(ROOT), *filter(None, [env.get("PYTHONPATH")])]
        )
        # An empty ini of our own: without it pytest finds this repository's pyproject.toml
        # above the test files, and its `filterwarnings = error` fails Nsight's tests on
        # warnings that Nsight Python itself emits.
        ini = Path(tmp) / "pytest.ini"
        ini.write_text("[pytest]\n")
        deadline = time.monotonic() + args.timeout_s
        # One pytest per file: each case's file is then known for sure (junit names a file
        # that fails to import oddly), and a file that runs past the limit loses only itself.
        for i, test_file in enumerate(files):
            junit = Path(tmp) / f"junit{i}.xml"
            cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rN",
                   "-c", str(ini), f"--junitxml={junit}", "--rootdir", str(scratch),
                   str(test_file)]  # fmt: skip
            if args.expr:
                cmd += ["-k", args.expr]
            left = deadline - time.monotonic()
            try:
                proc = subprocess.run(
                    cmd,
                    cwd=scratch,
                    env=env,
                    timeout=max(left, 1.0),
                    capture_output=True,
                    text=True,
                )
            except subprocess.TimeoutExpired:
                rows.append((test_file.name, "<time limit>", "error", "ran past --timeout-s"))
                continue
            if not junit.exists():
                tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
                rows.append((test_file.name, "<pytest>", "error", tail[0][:200]))
                continue
            rows += _outcomes(junit, test_file.name)
    by_file: dict[str, Counter[str]] = defaultdict(Counter)
    for file, _, outcome, _ in rows:
        by_file[file][outcome] += 1
    total: Counter[str] = Counter(o for _, _, o, _ in rows)
    kinds = ("passed", "failed", "error", "skipped")
    print(f"{'file':40} " + " ".join(f"{k:>7}" for k in kinds))
    for file in sorted(by_file):
        print(f"{file:40} " + " ".join(f"{by_file[file][k]:>7}" for k in kinds))
    print(f"{'TOTAL':40} " + " ".join(f"{total[k]:>7}" for k in kinds))
    for file, name, outcome, message in rows:
        if args.verbose or outcome in ("failed", "error"):
            print(f"{outcome:7} {file}::{name}  {message}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
