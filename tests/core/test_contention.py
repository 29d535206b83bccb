"""The host is part of the measurement: math threads per process, load around each job.

Measured from outside on a busy 2-core host: a torch candidate 30-100x faster read as
resolvably slower, and 38-107x with one math thread for the server's processes; nothing in
the answer said the host was busy.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nsight_core import pipeline
from nsight_core.host.contention import HostLoad, TenantWatch, contention, gpu_shared, load_note
from nsight_core.host.gpus import _descends_from
from nsight_core.pipeline import run_profile_job
from nsight_core.processes.sandbox.env import build_env, math_threads
from tests.core.test_standby import request


def test_each_process_of_a_job_gets_half_the_cpus_math_threads_unless_the_caller_chose() -> None:
    env = build_env(base={"PATH": "/bin"}, home=Path("/tmp"))
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == str(math_threads())
    assert math_threads() >= 1
    mine = build_env(base={"OMP_NUM_THREADS": "3", "OPENBLAS_NUM_THREADS": "2"}, home=Path("/t"))
    assert mine["OMP_NUM_THREADS"] == "3" and mine["OPENBLAS_NUM_THREADS"] == "2"


def test_more_runnable_work_than_cpus_around_a_job_is_a_reason() -> None:
    calm, busy = HostLoad(0.8, 2), HostLoad(5.5, 2)
    assert contention(calm, calm) is None
    said = contention(calm, busy)
    assert said is not None and "5.5 on 2 CPU(s)" in said
    assert contention(HostLoad(None, 2), HostLoad(None, 2)) is None  # unknown: nothing said
    assert "1 math thread(s)" in load_note(calm, busy, "1")


def test_an_in_process_timers_rows_say_when_the_host_was_contended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    quiet = run_profile_job(request(), tmp_path / "q", result_id="q")
    assert quiet.provenance is not None
    assert any(n.startswith("host: ") for n in quiet.provenance.notes), quiet.provenance.notes
    # The same job on a host whose load average reads far above its CPUs.
    monkeypatch.setattr(pipeline, "host_load", lambda *_: HostLoad(64.0, 2))
    busy = run_profile_job(request(), tmp_path / "b", result_id="b")
    assert busy.status == "done", busy.message
    assert busy.rows and all(
        any(r.startswith("host contended") for r in row.Reasons) for row in busy.rows
    )


def test_a_gpu_shared_with_another_process_is_a_reason_and_ours_are_not_blamed() -> None:
    alone = HostLoad(0.5, 2, gpu_ours=2)
    shared = HostLoad(0.5, 2, gpu_ours=1, gpu_others=("pid 4242 (python, 812 MiB)",))
    assert gpu_shared(alone) is None  # our own pre-started judges only wait
    said = gpu_shared(shared)
    assert (
        said is not None and "pid 4242 (python, 812 MiB)" in said and said.startswith("GPU shared")
    )
    note = load_note(alone, shared, "1")
    assert "1 process(es) of this server, others: pid 4242" in note
    assert "on its GPU" not in load_note(alone, HostLoad(0.5, 2), None)  # not read: not said


def test_our_processes_are_told_from_others_by_their_parent_links() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert _descends_from(child.pid, os.getpid())
        assert not _descends_from(os.getpid(), child.pid)
        assert not _descends_from(1, os.getpid())
    finally:
        child.kill()
        child.wait()


def test_a_job_with_no_gpu_named_reads_no_gpu() -> None:
    assert TenantWatch(None).result() is None  # a CPU job is never blamed on a GPU's tenants
