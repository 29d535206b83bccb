"""Triton's per-process start on a side thread (triton_prep.py): it never fails a process,
it is skipped where there is no driver, and where it runs, Triton's first launch finds its
source key cached. Each case runs in a fresh interpreter, as a contestant starts."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from nsight_core.runtime.triton_prep import TritonPrep


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
        "nsight_core.runtime.triton_prep.DRIVER", "libcuda-that-does-not-exist.so.1"
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
        import nsight_core.runtime.triton_prep as tp
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
