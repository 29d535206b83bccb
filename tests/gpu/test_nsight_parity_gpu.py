"""Nsight Python 1.1 parity on a GPU: its raised failures, info collectors under ncu, the
CUPTI tool, and CUDA initialised before ``import nsight_core``.

Run on a GPU host: ``python -m pytest -m gpu -s tests/gpu/test_nsight_parity_gpu.py``.
Each test prints what the closing note quotes. torch's ``a @ b`` and ``a + b`` are one
kernel each on the H200 (Nsight Python's own tests assume the same).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import nsight_core as nsight
from nsight_core.errors import ErrorClass
from nsight_core.exceptions import KernelCountError

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("own_tempdir")]

QUIET = nsight.VerbosityLevel.SILENT


def two_kernels(n: int) -> None:
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    with nsight.annotate("two"):
        _ = a @ b
        _ = a + b


def more_kernels_at_512(n: int) -> None:
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    with nsight.annotate("varies"):
        _ = a @ b
        if n >= 512:
            _ = a + b


def test_several_kernels_without_a_combiner_raise_nsights_runtime_error() -> None:
    f = nsight.analyze.kernel(configs=[(256,)], runs=2, verbosity=QUIET)(two_kernels)
    with pytest.raises(RuntimeError, match=r"More than one .* kernel is launched") as err:
        f()
    print(f"\n[two kernels] {err.value}")
    assert isinstance(err.value, KernelCountError)
    rows = err.value.results.rows  # type: ignore[attr-defined]
    assert rows and all(r.ErrorClass is ErrorClass.KERNEL_COUNT_MISMATCH for r in rows)
    summed = nsight.analyze.kernel(
        configs=[(256,)], runs=2, verbosity=QUIET, combine_kernel_metrics="sum"
    )(two_kernels)()
    ranged = nsight.analyze.kernel(configs=[(256,)], runs=2, verbosity=QUIET, replay_mode="range")(
        two_kernels
    )()
    print(f"[two kernels] sum: {summed.rows[0].Kernel}; range: {ranged.rows[0].Kernel}")
    assert summed.rows[0].AvgValue is not None and "|" in (summed.rows[0].Kernel or "")
    assert ranged.rows[0].Kernel == "range"


def test_counts_that_differ_between_configs_raise_without_a_combiner_only() -> None:
    f = nsight.analyze.kernel(configs=[(256,), (512,)], runs=1, verbosity=QUIET)(
        more_kernels_at_512
    )
    with pytest.raises(RuntimeError, match="Expect same number of kernels per run") as err:
        f()
    print(f"\n[varying counts] {err.value}")
    folded = nsight.analyze.kernel(
        configs=[(256,), (512,)], runs=2, verbosity=QUIET, combine_kernel_metrics="sum"
    )(more_kernels_at_512)()
    kernels = [r.Kernel for r in folded.rows]
    print(f"[varying counts] folded per run: {kernels}")
    assert all(r.AvgValue is not None for r in folded.rows) and "|" in (kernels[1] or "")


_order = {"count": 0}


@nsight.experimental.collect(scope=nsight.CollectionScope.ANNOTATION)
def order(annotation_name: str, *config: int) -> int:
    _order["count"] += 1
    return _order["count"]


@nsight.experimental.collect(scope=nsight.CollectionScope.RUN)
def device(n: int) -> str:
    return torch.cuda.get_device_name()


@nsight.experimental.collect(scope=nsight.CollectionScope.ONCE)
def torch_version() -> str:
    return torch.__version__


def test_info_collectors_under_ncu_give_nsights_columns() -> None:
    @nsight.analyze.kernel(
        configs=[(256,), (512,)], runs=3, verbosity=QUIET,
        info_collectors=[order, device, torch_version],
    )  # fmt: skip
    def f(n: int) -> None:
        a = torch.randn(n, n, device="cuda")
        with nsight.annotate("add"):
            _ = a + a
        with nsight.annotate("mul"):
            _ = a * a

    frame = f().to_dataframe()
    print(
        "\n"
        + frame[["Annotation", "n", "AvgValue", "order_Min", "order_Max", "device"]].to_string()
    )
    mul512 = frame[(frame["Annotation"] == "mul") & (frame["n"] == 512)].iloc[0]
    assert (mul512["order_Min"], mul512["order_Max"]) == (8, 12)
    assert (frame["torch_version"] == torch.__version__).all()
    assert (frame["device"] == torch.cuda.get_device_name()).all()


def test_the_cupti_tool_is_the_backend_of_functions_that_name_none() -> None:
    if not nsight.utils.CUPTI_AVAILABLE:
        pytest.skip("cupti-python is not installed on this host")
    nsight.activate(nsight.Tool.CUPTI)
    try:
        results = nsight.analyze.kernel(configs=[(512,)], runs=3, verbosity=QUIET)(two_kernels)
        with pytest.raises(KernelCountError):
            results()  # two kernels, no combiner: the same rule under CUPTI
        summed = nsight.analyze.kernel(
            configs=[(512,)], runs=3, verbosity=QUIET, combine_kernel_metrics="sum"
        )(two_kernels)()
    finally:
        nsight.deactivate()
    row = summed.rows[0]
    print(f"\n[cupti] {row.Metric} {row.AvgValue} {row.Unit} {row.Kernel}")
    assert row.Backend == "cupti" and row.AvgValue is not None and row.AvgValue > 0


CUDA_FIRST = """
import torch

torch.cuda.init()
torch.zeros(1, device="cuda")  # a context exists before nsight_core is imported

import nsight_core as nsight


@nsight.analyze.kernel(configs=[(1024,)], runs=3, verbosity=nsight.VerbosityLevel.SILENT)
def mm(n):
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    with nsight.annotate("mm"):
        _ = a @ b


row = mm().rows[0]
assert row.AvgValue is not None and row.AvgValue > 0, row
print("profiled", row.Kernel, row.AvgValue, row.Unit, row.Backend)
"""


def test_cuda_initialised_before_the_import_still_profiles(tmp_path: Path) -> None:
    """Nsight Python 1.x fails here ("failed to begin profiling", code 3): its injection
    must load before CUDA starts. Each call here profiles a fresh worker under ncu, so the
    caller's CUDA context does not matter."""
    script = tmp_path / "cuda_first.py"
    script.write_text(textwrap.dedent(CUDA_FIRST))
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    print(f"\n[cuda first] rc={proc.returncode}: {out.strip()}")
    assert proc.returncode == 0, err[-2000:]
    assert re.search(r"^profiled \S+ [0-9.e+]+ \S+ ncu$", out.strip(), re.MULTILINE)
