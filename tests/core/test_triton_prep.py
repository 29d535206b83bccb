"""Triton's per-process start on a side thread (triton_prep.py): it never fails a process,
it is skipped where there is no driver, and where it runs, Triton's first launch finds its
source key cached. Each case runs in a fresh interpreter, as a contestant starts."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nsight_core.contestant.triton_prep import TritonPrep


def _run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_without_a_driver_the_thread_says_why_and_imports_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        "nsight_core.contestant.triton_prep.DRIVER", "libcuda-that-does-not-exist.so.1"
    )
    prep = TritonPrep()
    prep.join()
    assert prep.error is not None and prep.error.startswith("no CUDA driver"), prep.error
    assert prep.seconds is not None and prep.seconds >= 0.0


def test_with_triton_the_thread_leaves_its_source_key_cached() -> None:
    """The thread runs while the main thread imports torch (the two imports do not wait for
    each other); after the join, Triton's key function answers from its cache (the first
    launch's largest part)."""
    pytest.importorskip("triton")
    stdout = _run(
        """
        import threading
        import nsight_core.contestant.triton_prep as tp
        tp.DRIVER = "libc.so.6"  # a library every Linux host has: stands in for the driver
        prep = tp.TritonPrep()
        from nsight_core.runtime.process import preload_frameworks
        preload_frameworks(("numpy", "torch"))
        prep.join()
        assert prep.error is None, prep.error
        assert "nspy triton prep" not in [t.name for t in threading.enumerate()]
        from triton.runtime.cache import triton_key
        before = triton_key.cache_info().hits
        triton_key()
        assert triton_key.cache_info().hits == before + 1, triton_key.cache_info()
        import sys
        print("ok", "torch" in sys.modules, "triton.experimental.gluon" in sys.modules)
        """
    )
    assert stdout.split() == ["ok", "True", "True"]


def test_the_threads_imports_never_reach_a_directory_added_after_it_was_made(
    tmp_path: Path,
) -> None:
    """The reference's load adds the workdir to ``sys.path`` while the thread may still
    import: a look-alike there must not run on the thread (HarnessPathOnly), while the
    thread that imports the job's code still finds it."""
    (tmp_path / "nspy_lookalike_only_here.py").write_text("VALUE = 'from the workdir'\n")
    (tmp_path / "colorsys.py").write_text("raise SystemExit('the workdir copy ran')\n")
    stdout = _run(
        f"""
        import importlib, sys, threading
        from nsight_core.contestant.triton_prep import HarnessPathOnly
        results = {{}}
        ready, added = threading.Event(), threading.Event()

        def prep():
            ready.set()
            added.wait()
            try:
                importlib.import_module("nspy_lookalike_only_here")
                results["new"] = "imported"
            except ModuleNotFoundError as exc:
                results["new"] = "refused" if "harness's path" in str(exc) else str(exc)
            results["stdlib"] = importlib.import_module("colorsys").__file__
            results["json"] = importlib.import_module("json").__name__

        t = threading.Thread(target=prep)
        t.start()
        finder = HarnessPathOnly(t.ident, list(sys.path))
        sys.meta_path.insert(0, finder)
        ready.wait()
        sys.path.insert(0, {str(tmp_path)!r})  # as a job's workdir is, after the thread began
        added.set()
        t.join()
        sys.meta_path.remove(finder)
        here = importlib.import_module("nspy_lookalike_only_here").VALUE
        print(results["new"], results["stdlib"].startswith({str(tmp_path)!r}), results["json"], here)
        """
    )
    assert stdout.split(maxsplit=3) == ["refused", "False", "json", "from the workdir\n"], stdout
