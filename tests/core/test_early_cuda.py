"""The early CUDA thread (early_cuda.py) never fails a process; on a GPU it makes the one
context torch then uses (tests/gpu/test_engine_gpu.py checks that part)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from nsight_core.runtime.early_cuda import EarlyCuda


def test_without_a_usable_driver_the_thread_says_why_and_the_process_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("nsight_core.runtime.early_cuda.DRIVER", "libcuda-that-does-not-exist.so.1")
    early = EarlyCuda(prime=True)
    early.join()
    assert early.context is None
    assert early.error is not None and "no CUDA driver" in early.error
    assert early.seconds is not None and early.seconds >= 0.0
    # No context, no prime: the contestant then says it ran none, and its report's first
    # result is sorted like any other (collectors/ranges.py).
    assert early.primed is None


def test_a_job_process_starts_the_thread_before_its_frameworks_and_joins_it() -> None:
    """In a fresh interpreter, as the contestant does: the thread runs while numpy is
    imported, `init_cuda` joins it, and the interpreter ends normally (a daemon thread)."""
    code = textwrap.dedent(
        """
        import sys, threading
        from nsight_core.runtime.early_cuda import EarlyCuda
        from nsight_core.runtime.process import init_cuda, preload_frameworks
        early = EarlyCuda()
        preload_frameworks(("numpy",))
        init_cuda(early)
        assert not early._thread.is_alive()
        assert early.seconds is not None
        assert (early.context is None) == (early.error is not None)
        names = [t.name for t in threading.enumerate()]
        assert "nspy early cuda" not in names, names
        print("ok", early.error is None)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok ")
