"""A `@kernel` function that calls a Triton kernel of its own script travels to its worker.

cloudpickle copies a script's globals by value, and a `JITFunction` holds locks that cannot
be pickled (Nsight Python's example 07 failed so). The kernel travels as its function and
`triton.jit`'s options and is built again on load: shown here across real processes, the
script run as ``__main__`` as a user runs it. Needs triton (no GPU: nothing is launched).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("triton")

SCRIPT = textwrap.dedent(
    """
    import sys
    import triton
    import triton.language as tl
    from nsight_core.nsight.pickling import dumps

    @triton.jit(do_not_specialize=["n"])
    def add_kernel(x_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(axis=0)
        tl.store(x_ptr + pid, tl.load(x_ptr + pid) + 1)

    def launch(x, n):
        add_kernel[(n,)](x, n, BLOCK=128)
        return add_kernel

    sys.stdout.buffer.write(dumps(launch))
    """
)

LOAD = textwrap.dedent(
    """
    import pickle, sys
    launch = pickle.loads(sys.stdin.buffer.read())
    kernel = launch.__globals__["add_kernel"]
    print(type(kernel).__name__, kernel.fn.__name__, list(kernel.do_not_specialize))
    print("tl.store" in kernel.src)
    """
)


def test_a_scripts_triton_kernel_is_rebuilt_in_another_process(tmp_path: Path) -> None:
    script = tmp_path / "user_script.py"
    script.write_text(SCRIPT)
    made = subprocess.run(
        [sys.executable, str(script)], capture_output=True, timeout=120, check=False
    )
    assert made.returncode == 0, made.stderr.decode()[-2000:]
    loaded = subprocess.run(
        [sys.executable, "-c", LOAD],
        input=made.stdout,
        capture_output=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert loaded.returncode == 0, loaded.stderr.decode()[-2000:]
    assert loaded.stdout.decode().split("\n")[:2] == ["JITFunction add_kernel ['n']", "True"]
