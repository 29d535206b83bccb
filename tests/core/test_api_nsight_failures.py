"""Where Nsight Python raises, the `@kernel` API raises the same class, saying what to change.

Kernel counts are judged on per-run values reduced from records shaped as extraction makes
them (the GPU side of the same rule is tests/gpu/test_nsight_parity_gpu.py); the tool
interface and the no-kernels case run real worker jobs on CPU.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pytest

import nsight_core as nsight
from nsight_core.collectors.extract import KernelRecord
from nsight_core.errors import ErrorClass
from nsight_core.exceptions import KernelCountError, NCUNotAvailableError, ProfilerException
from nsight_core.host.ncu_install import discover_ncu
from nsight_core.nsight import tools
from nsight_core.nsight.api import _reducers
from nsight_core.nsight.nsight_errors import kernel_count_error
from nsight_core.plan.config import EngineConfig
from nsight_core.protocol import RunKey
from nsight_core.request import KernelsSpec
from nsight_core.rows.run_values import RunValues, reduce_runs

pytestmark = pytest.mark.usefixtures("own_tempdir")

T = "gpu__time_duration.sum"
PCT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"


def reduced(
    launches: dict[tuple[int, int], Sequence[str]], kernels: KernelsSpec | None = None
) -> RunValues:
    """Per-run values of annotation 'a' whose (config, run) launched the kernels named;
    without ``kernels``, folded as the `@kernel` API folds without combine_kernel_metrics."""
    records, keys = [], []
    for seq, ((config, run), names) in enumerate(sorted(launches.items())):
        key = RunKey("a", config, run)
        keys.append(key)
        records += [
            KernelRecord(key, k, k, T, 1000.0, "ns", 10 * seq + i) for i, k in enumerate(names)
        ]
    return reduce_runs(records, keys, [T], kernels or KernelsSpec(combine=_reducers(None, [T])))


def test_several_kernels_per_run_without_a_combiner_is_nsights_runtime_error() -> None:
    err = kernel_count_error(reduced({(0, 0): ["add", "mul"], (0, 1): ["add", "mul"]}))
    assert isinstance(err, RuntimeError) and isinstance(err, ProfilerException)
    assert err.error_class is ErrorClass.KERNEL_COUNT_MISMATCH
    # The patterns Nsight Python's own tests match.
    assert re.search("More than one .* kernel is launched", str(err))
    assert re.search("More than one.*kernel.*launched within the a annotation", str(err))
    assert "['add', 'mul']" in str(err) and "combine_kernel_metrics" in err.hint
    assert "replay_mode='range'" in err.hint and "ignore_kernel_list" in err.hint


def test_the_kernel_api_keeps_nsights_one_kernel_rule_where_a_request_would_sum() -> None:
    """A request that leaves kernels.combine out sums a call's kernel times; the `@kernel`
    API names 'none' for every metric its combine_kernel_metrics leaves out, so Nsight
    Python's contract (several kernels need a combiner) holds there."""
    launches: dict[tuple[int, int], Sequence[str]] = {
        (0, 0): ["add", "mul"],
        (0, 1): ["add", "mul"],
    }
    assert kernel_count_error(reduced(launches, KernelsSpec())) is None
    assert _reducers({T: "sum"}, [T, PCT]) == {T: "sum", PCT: "none"}
    assert _reducers(lambda x, y: x + y, [T]) == "none"  # the callable travels apart
    err = kernel_count_error(reduced(launches))
    assert err is not None and err.error_class is ErrorClass.KERNEL_COUNT_MISMATCH


def test_counts_that_differ_without_a_combiner_name_every_runs_count() -> None:
    err = kernel_count_error(reduced({(0, 0): ["mm"], (1, 0): ["mm", "add"]}))
    assert err is not None
    assert str(err).startswith("Expect same number of kernels per run")
    assert "(config 0: 1 per run (1 run); config 1: 2 per run (1 run))" in str(err)
    mixed = kernel_count_error(reduced({(0, 0): ["mm"], (0, 1): ["mm", "add"], (1, 0): ["mm"]}))
    assert mixed is not None and "config 0: run 0: 1, run 1: 2; config 1: 1 per run" in str(mixed)


def test_counts_that_differ_between_configs_are_fine_once_folded() -> None:
    """Attribution is by identity, so a combiner folds each run's own kernels (Nsight
    Python skips this case: it maps kernels to runs by position)."""
    values = reduced({(0, 0): ["mm"], (1, 0): ["mm", "add"]}, KernelsSpec(combine="sum"))
    assert kernel_count_error(values) is None
    assert kernel_count_error(reduced({(0, 0): ["mm"], (0, 1): ["mm"]})) is None


def test_counts_that_differ_between_runs_of_one_config_raise_even_with_a_combiner() -> None:
    values = reduced({(0, 0): ["mm"], (0, 1): ["mm", "tune"]}, KernelsSpec(combine="sum"))
    err = kernel_count_error(values)
    assert err is not None and "Expect same number of kernels per run" in str(err)
    assert "warmup" in err.hint


def test_a_call_without_annotated_regions_raises_no_kernels_as_a_runtime_error() -> None:
    @nsight.analyze.kernel(configs=[(8,)], backend="events", verbosity=0)
    def f(n: int) -> None:
        np.ones(n).sum()

    with pytest.raises(RuntimeError) as err:
        f()
    assert isinstance(err.value, KernelCountError)
    assert err.value.error_class is ErrorClass.NO_KERNELS


@pytest.fixture
def no_tool() -> object:
    tools.deactivate()
    yield None
    tools.deactivate()


def body(n: int) -> None:
    with nsight.annotate("sum"):
        np.ones(n).sum()


@pytest.mark.usefixtures("no_tool")
def test_the_tool_interface_keeps_nsights_rules() -> None:
    assert nsight.get_active_tool() is None  # importing activates nothing here
    with pytest.raises(
        ValueError, match=r"tool must be a nsight.Tool member \(one of \['NCU', 'CUPTI'\]\)"
    ):
        nsight.activate("ncu")  # type: ignore[arg-type]
    if discover_ncu(EngineConfig.from_env()).used is None:
        with pytest.raises(NCUNotAvailableError):
            nsight.activate(nsight.Tool.NCU)
    if not nsight.utils.CUPTI_AVAILABLE:
        with pytest.raises(ImportError, match="cupti-python"):
            nsight.activate(nsight.Tool.CUPTI)
    nsight.deactivate()  # nothing active: a no-op
    assert nsight.get_active_tool() is None


@pytest.mark.usefixtures("no_tool")
def test_a_function_takes_the_active_tools_backend_at_its_first_call_and_keeps_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Activation loads nothing here; pretend cupti-python is installed so that CUPTI can be
    # chosen on this CPU host: its contestant then fails to load cupti, which names the
    # backend each call ran under.
    monkeypatch.setattr(tools, "CUPTI_AVAILABLE", True)
    nsight.activate(nsight.Tool.CUPTI)
    nsight.activate(nsight.Tool.CUPTI)  # the same tool again: a no-op
    with pytest.raises(RuntimeError, match=r"is already active; cannot switch .*deactivate"):
        nsight.activate(nsight.Tool.NCU)
    first = nsight.analyze.kernel(configs=[(8,)], runs=1, thermal_mode="off", verbosity=0)(body)
    with pytest.raises(Exception, match="No module named 'cupti'"):
        first()
    nsight.deactivate()
    assert nsight.get_active_tool() is None
    with pytest.raises(Exception, match="No module named 'cupti'"):
        first()  # resolved at its first call: still cupti
    later = nsight.analyze.kernel(configs=[(8,)], runs=1, thermal_mode="off", verbosity=0)(body)
    if discover_ncu(EngineConfig.from_env()).used is None:
        with pytest.raises(NCUNotAvailableError):
            later()  # no tool active: ncu, which this host lacks


def test_a_run_that_ended_early_says_why_before_normalize_against_misses_its_annotation() -> None:
    # The run died before entering 'first': the answer is why it died, not that the
    # annotation to normalize against is missing from the data it never made.
    @nsight.analyze.kernel(configs=[(8,)], backend="events", normalize_against="first", verbosity=0)
    def f(n: int) -> None:
        import os

        os._exit(3)

    with pytest.raises(ProfilerException) as err:
        f()
    assert "not found in data" not in str(err.value)
    assert err.value.error_class is not ErrorClass.INVALID_REQUEST, str(err.value)
