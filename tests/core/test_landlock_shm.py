"""A confined process and /dev/shm: files there outlive a job, so none may be created.

POSIX shared memory is a folder every process of the host shares; a file one contestant
left there would reach the next job's. Confined, a contestant may still open the files
another process made for it (CUDA IPC and torch's reference counts of a shared tensor),
and torch works as before.
"""

from __future__ import annotations

import json
import secrets
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsight_core.processes.sandbox import (
    SandboxLimits,
    default_fs_access,
    landlock_abi,
    run_sandboxed,
)

pytestmark = pytest.mark.skipif(
    landlock_abi() < 1 or not Path("/dev/shm").is_dir(), reason="no Landlock or no /dev/shm"
)


@pytest.fixture
def shared_file() -> Iterator[Path]:
    """A file in /dev/shm made by another process (this one) before the job."""
    path = Path("/dev/shm") / f"nspy-test-{secrets.token_hex(6)}"
    path.write_bytes(b"\0" * 16)
    yield path
    path.unlink(missing_ok=True)


def test_a_confined_process_creates_nothing_in_dev_shm_and_still_runs_torch(
    tmp_path: Path, shared_file: Path
) -> None:
    made = Path("/dev/shm") / f"nspy-channel-{secrets.token_hex(6)}"
    # As a contestant does: frameworks first, then it confines itself (contestant.confine).
    code = textwrap.dedent(
        f"""
        import json, multiprocessing, pathlib
        import torch
        from nsight_core.processes.sandbox import default_fs_access, restrict_this_process
        restrict_this_process(default_fs_access(pathlib.Path.cwd()))
        def attempt(f):
            try:
                f()
                return "ok"
            except OSError as e:
                return type(e).__name__
        def rewrite():
            with open({str(shared_file)!r}, "r+b") as fh:
                fh.write(b"from another")
        def softmax():
            x = torch.randn(8, 16)
            assert torch.allclose(torch.softmax(x, -1).sum(-1), torch.ones(8))
        print(json.dumps({{
            "create_shm": attempt(lambda: open({str(made)!r}, "w").write("x")),
            "open_existing_shm": attempt(rewrite),
            "list_shm": attempt(lambda: __import__("os").listdir("/dev/shm")),
            "remove_shm": attempt(lambda: __import__("os").unlink({str(shared_file)!r})),
            "dev_null": attempt(lambda: open("/dev/null", "w").write("x")),
            "semaphore": attempt(lambda: multiprocessing.Lock()),
            "torch": attempt(softmax),
        }}))
        """
    )
    out = run_sandboxed(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        limits=SandboxLimits(wall_s=120.0),
    )
    assert out.error_class is None, out.message
    seen = json.loads(out.stdout.text())
    assert not made.exists()
    assert seen["create_shm"] == seen["remove_shm"] == "PermissionError", seen
    # A POSIX semaphore (Python's multiprocessing locks) is a file created there too.
    assert seen["semaphore"] != "ok", seen
    assert seen["open_existing_shm"] == seen["list_shm"] == seen["dev_null"] == "ok", seen
    assert seen["torch"] == "ok", seen
    assert shared_file.read_bytes().startswith(b"from another")


def test_the_gpu_device_files_are_writable_and_nothing_else_in_dev_is() -> None:
    access = default_fs_access(Path("/tmp"))
    written = {str(p) for p in access.write}
    assert "/dev" not in written and "/dev/shm" not in written
    assert {"/dev/null", "/dev/urandom"} <= written
    assert all(str(p) in written for p in Path("/dev").glob("nvidia*"))
    assert [str(p) for p in access.open_existing] == ["/dev/shm"]
    assert "/dev" in {str(p) for p in access.read}
