"""The cupti backend on CPU: registration, preflight, and the pure parts of attribution.

No cupti module is faked: the timer's filtering and the judge/parent folding are pure
functions over plain records, tested here with the real reduction (`reduce_runs`,
`aggregate_rows`). The timer itself runs on a GPU (tests/gpu/test_cupti_gpu.py).
"""

from __future__ import annotations

import enum
import importlib.util
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from nsight_core.collectors import backend_names, get_backend
from nsight_core.collectors.base import Wrapped
from nsight_core.collectors.cupti import CUPTI, launch_cbids
from nsight_core.collectors.cupti_records import (
    ApiActivity,
    KernelActivity,
    KernelSpan,
    harness_thread,
    incomplete,
    launched_elsewhere,
    split_by_launch,
)
from nsight_core.collectors.cupti_samples import (
    CUPTI_DURATION,
    CUPTI_LATENCY,
    CUPTI_METRICS,
    CUPTI_SPAN,
    call_samples,
    union_ns,
)
from nsight_core.collectors.kernel_names import base_name, kernel_name
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.plan.config import EngineConfig
from nsight_core.protocol import RunKey, SampleEvent
from nsight_core.request import DEFAULT_METRIC, KernelsSpec, Reducer
from nsight_core.results import Row
from nsight_core.rows.aggregate import RowContext, aggregate_rows, reduce_runs
from nsight_core.settings import JobSettings

HAVE_CUPTI = importlib.util.find_spec("cupti") is not None


def settings(
    combine: Reducer | dict[str, Reducer] = "none",
    ignore: Sequence[str] = (),
    metrics: Sequence[str] = (DEFAULT_METRIC,),
    replay_mode: str = "kernel",
) -> JobSettings:
    spec = KernelsSpec.model_validate(
        {"combine": combine, "ignore": list(ignore), "replay_mode": replay_mode}
    )
    return JobSettings(backend="cupti", metrics=tuple(metrics), kernels=spec, runs=2)


# -- registration and preflight -----------------------------------------------------------


def test_cupti_is_registered_as_an_in_process_backend_of_its_own_timer() -> None:
    assert "cupti" in backend_names()
    backend = get_backend("cupti")
    assert backend is CUPTI
    assert (backend.evidence, backend.child_timer) == ("in_process", "cupti")
    assert (backend.any_metric, backend.settings_apply) == (False, False)
    assert backend.default_metric == CUPTI_DURATION
    assert backend.measures(settings()) == list(CUPTI_METRICS)
    argv = [sys.executable, "-m", "nsight_core.contestant", "/tmp/x"]
    assert backend.wrap(
        argv, settings().launch(), Path("/tmp"), EngineConfig.from_env()
    ) == Wrapped(argv)


def test_importing_the_collectors_never_imports_cupti() -> None:
    """The server imports every backend; only the contestant may load libcupti."""
    code = "import sys, nsight_core.collectors; print('cupti' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "False"


@pytest.mark.skipif(HAVE_CUPTI, reason="cupti-python is installed here: nothing to refuse")
def test_preflight_refuses_without_cupti_python_and_says_how_to_install_it() -> None:
    with pytest.raises(NsightCoreError) as err:
        CUPTI.preflight(settings(), EngineConfig.from_env())
    assert err.value.error_class == ErrorClass.INVALID_REQUEST
    assert "cupti-python" in err.value.message and sys.executable in err.value.message
    assert "pip install 'nspy-mcp[cupti]'" in err.value.hint
    assert "13.0.x" in err.value.hint and "events" in err.value.hint


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"metrics": ["dram__bytes_read.sum"]}, "measures time only"),
        ({"replay_mode": "range"}, "replay_mode 'range'"),
    ],
)
def test_preflight_refuses_counters_and_range_replay_before_looking_for_cupti(
    kwargs: dict[str, object], needle: str
) -> None:
    with pytest.raises(NsightCoreError) as err:
        CUPTI.preflight(settings(**kwargs), EngineConfig.from_env())  # type: ignore[arg-type]
    assert err.value.error_class == ErrorClass.INVALID_REQUEST
    assert needle in err.value.message


# -- the child's attribution: which kernels belong to the call ----------------------------

T0, T1 = 1_000_000, 2_000_000


def test_kernels_launched_in_the_window_are_kept_on_every_stream_in_start_order() -> None:
    apis = [
        ApiActivity(start=900_000, end=905_000, correlation_id=10),  # the L2 flush's launch
        ApiActivity(start=1_000_100, end=1_000_900, correlation_id=11),  # main stream
        ApiActivity(start=1_001_000, end=1_001_800, correlation_id=12),  # side stream
        ApiActivity(start=2_100_000, end=2_100_500, correlation_id=13),  # harness copy after
    ]
    kernels = [
        KernelActivity("fill", 906_000, 990_000, stream=7, correlation_id=10),
        KernelActivity("side", 1_003_000, 1_050_000, stream=9, correlation_id=12),
        KernelActivity("main", 1_002_000, 1_060_000, stream=7, correlation_id=11),
        KernelActivity("copy", 2_101_000, 2_102_000, stream=7, correlation_id=13),
    ]
    kept = split_by_launch(kernels, apis, T0, T1)[1]
    assert [(k.name, k.stream) for k in kept] == [("main", 7), ("side", 9)]


def test_attribution_follows_the_launch_not_the_device_clock() -> None:
    """A kernel launched in the window counts even when it starts after t1 on the device
    clock (skew); one launched before t0 never does, even if it ran inside the window."""
    apis = [
        ApiActivity(start=1_500_000, end=1_500_500, correlation_id=21),
        ApiActivity(start=999_000, end=999_500, correlation_id=22),
    ]
    kernels = [
        KernelActivity("late_clock", 2_000_500, 2_010_000, stream=7, correlation_id=21),
        KernelActivity("queued_before", 1_200_000, 1_300_000, stream=7, correlation_id=22),
    ]
    assert [k.name for k in split_by_launch(kernels, apis, T0, T1)[1]] == ["late_clock"]


def test_a_kernel_without_a_launch_record_falls_back_to_its_device_start() -> None:
    kernels = [
        KernelActivity("inside", 1_400_000, 1_410_000, stream=7, correlation_id=31),
        KernelActivity("before", 900_000, 910_000, stream=7, correlation_id=32),
    ]
    assert [k.name for k in split_by_launch(kernels, [], T0, T1)[1]] == ["inside"]


def test_kernels_another_thread_launched_between_calls_are_found() -> None:
    """The harness's thread is the one that launched last before the window (its L2
    flush; its synchronisation too where every API is recorded); between
    calls only the harness launches on it, so anything launched on another thread is work
    outside every call's range."""
    harness, stray = 101, 202
    window = [
        ApiActivity(start=900_000, end=905_000, correlation_id=10, thread=harness),  # L2 flush
        ApiActivity(start=990_000, end=999_000, correlation_id=11, thread=harness),  # sync
        ApiActivity(start=1_000_100, end=1_000_900, correlation_id=12, thread=stray),  # in call
    ]
    assert harness_thread(window, T0) == harness
    between_apis = [
        ApiActivity(start=2_100_000, end=2_100_500, correlation_id=20, thread=harness),  # copy
        ApiActivity(start=2_200_000, end=2_200_500, correlation_id=21, thread=stray),
    ]
    between = [
        KernelActivity("copy", 2_101_000, 2_102_000, stream=7, correlation_id=20),
        KernelActivity("busy_scan", 2_201_000, 2_300_000, stream=9, correlation_id=21),
        KernelActivity("unmatched", 2_400_000, 2_500_000, stream=9, correlation_id=99),
    ]
    assert [k.name for k in launched_elsewhere(between, between_apis, harness)] == ["busy_scan"]
    # Without thread ids (older records) or before the first window nothing is claimed.
    assert harness_thread([ApiActivity(1, 2, 3)], T0) is None
    assert launched_elsewhere(between, between_apis, None) == []


def test_one_flush_after_the_call_splits_what_ran_before_inside_and_after_it() -> None:
    """The timer flushes once, after the call: what ran since the previous call comes in the
    same batch (before t0) and a kernel another thread launched while the harness flushed
    (after t1) is kept for the next call, not lost and not counted."""
    apis = [
        ApiActivity(start=500_000, end=501_000, correlation_id=1, thread=101),  # last copy
        ApiActivity(start=600_000, end=601_000, correlation_id=2, thread=202),  # stray
        ApiActivity(start=1_100_000, end=1_101_000, correlation_id=3, thread=101),  # the call
        ApiActivity(start=2_050_000, end=2_051_000, correlation_id=4, thread=202),  # late
    ]
    kernels = [
        KernelActivity("late", 2_052_000, 2_060_000, stream=9, correlation_id=4),
        KernelActivity("main", 1_102_000, 1_200_000, stream=7, correlation_id=3),
        KernelActivity("copy", 502_000, 503_000, stream=7, correlation_id=1),
        KernelActivity("stray", 602_000, 1_500_000, stream=9, correlation_id=2),
        KernelActivity("no_api", 1_300_000, 1_310_000, stream=7, correlation_id=77),
    ]
    before, inside, after = split_by_launch(kernels, apis, T0, T1)
    assert [k.name for k in before] == ["copy", "stray"]
    assert [k.name for k in inside] == ["main", "no_api"]
    assert [k.name for k in after] == ["late"]
    assert [k.name for k in launched_elsewhere(before, apis, 101)] == ["stray"]


def test_only_launch_functions_keep_their_api_records() -> None:
    """The names follow cupti-python's callback-id enums: plain, extended, cooperative,
    per-thread-stream and graph launches are kept; queries, syncs and copies are not, nor
    the enum's INVALID/SIZE/FORCE_INT markers."""
    cbid = enum.IntEnum(
        "cbid",
        [
            ("INVALID", 0),
            ("cudaGetDevice_v3020", 1),
            ("cudaLaunchKernel_v7000", 2),
            ("cudaStreamSynchronize_v3020", 3),
            ("cudaLaunchKernelExC_ptsz_v11060", 4),
            ("cudaGraphLaunch_v10000", 5),
            ("cuCtxGetCurrent", 6),
            ("cuLaunchKernelEx", 7),
            ("cuGraphLaunch_ptsz", 8),
            ("cuMemcpyDtoH_v2", 9),
            ("SIZE", 10),
            ("FORCE_INT", 0x7FFFFFFF),
        ],
    )
    keep, drop = launch_cbids(cbid)
    assert sorted(keep) == [2, 4, 5, 7, 8]
    assert sorted(drop) == [1, 3, 6, 9]


@pytest.mark.skipif(not HAVE_CUPTI, reason="cupti-python is not installed")
def test_cuptis_own_enums_name_the_launch_functions() -> None:
    from cupti import cupti  # type: ignore[import-not-found,unused-ignore]

    for members, must in (
        (cupti.runtime_api_trace_cbid, "cudaLaunchKernel_v7000"),
        (cupti.driver_api_trace_cbid, "cuLaunchKernel"),
    ):
        keep, drop = launch_cbids(members)
        assert int(members[must]) in keep
        assert len(drop) > 10 * len(keep)


def test_records_without_timestamps_are_found() -> None:
    ok = KernelActivity("a", 10, 20, stream=1, correlation_id=1)
    zero = KernelActivity("b", 0, 0, stream=1, correlation_id=2)
    backwards = KernelActivity("c", 30, 25, stream=1, correlation_id=3)
    assert incomplete([ok, zero, backwards]) == [zero, backwards]


def test_union_counts_overlapping_kernels_once() -> None:
    assert union_ns([]) == 0
    assert union_ns([(0, 10), (5, 20), (30, 40)]) == 30
    assert union_ns([(30, 40), (0, 10)]) == 20
    assert union_ns([(0, 10), (10, 15)]) == 15


@pytest.mark.parametrize(
    ("demangled", "base"),
    [
        (
            "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, "
            "float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, "
            "float const*, int)",
            "cunn_SoftMaxForward",
        ),
        (
            "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<"
            "at::native::MulFunctor<float> >(at::TensorIteratorBase&, at::native::"
            "MulFunctor<float> const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_"
            "nocast<at::native::MulFunctor<float> >(at::TensorIteratorBase&, at::native::"
            "MulFunctor<float> const&)::{lambda(int)#1})",
            "elementwise_kernel",
        ),
        ("void cutlass::Kernel2<Gemm>(Gemm::Params)", "Kernel2"),
        ("_softmax_kernel", "_softmax_kernel"),
        ("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32", None),
    ],
)
def test_base_name_is_ncus_function_name(demangled: str, base: str | None) -> None:
    assert base_name(demangled) == (base or demangled)


def test_kernel_name_demangles_with_libstdcxx() -> None:
    mangled = (
        "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIhEE"
        "St5arrayIPcLm1EEEEviT0_T1_"
    )
    assert kernel_name(mangled) == "vectorized_elementwise_kernel"
    assert kernel_name("_softmax_kernel") == "_softmax_kernel"
    assert kernel_name("_Znot_really_mangled") == "_Znot_really_mangled"


# -- the parent's folding: samples -> records -> reduce_runs -> rows ------------------------


def span(name: str, start: int, dur: int, stream: int = 7) -> KernelSpan:
    return KernelSpan(name, start, start + dur, stream)


ANN = "mod.py:cand"


def samples_of(
    calls: Sequence[tuple[int, float, Sequence[KernelSpan]]], ignore: Sequence[str] = ()
) -> list[SampleEvent]:
    out: list[SampleEvent] = []
    for run, latency, kernels in calls:
        out += call_samples(RunKey(ANN, 0, run), latency, kernels, ignore)
    return out


TWO_KERNEL_CALLS = [
    # run, latency, kernels: a helper, then two kernels on two streams overlapping by 2 us
    (0, 30_000.0, [span("zero_fill", 0, 1_000), span("a", 2_000, 10_000), span("b", 10_000, 6_000, 9)]),
    (1, 31_000.0, [span("zero_fill", 0, 1_200), span("a", 2_000, 12_000), span("b", 12_000, 4_000, 9)]),
]  # fmt: skip


def rows_of(samples: Sequence[SampleEvent], s: JobSettings) -> list[Row]:
    got = CUPTI.read_records(Wrapped([]), samples, s)
    assert got.failures == []
    keys = [RunKey(ANN, 0, r) for r in range(2)]
    values = reduce_runs(got.records, keys, got.metrics, s.kernels)
    return aggregate_rows(values, RowContext(backend="cupti", evidence="in_process"))


def by_metric(rows: Sequence[Row]) -> dict[str, Row]:
    return {r.Metric: r for r in rows}


def test_the_judge_sends_one_duration_per_kernel_then_span_and_latency() -> None:
    got = call_samples(RunKey(ANN, 0, 0), 30_000.0, TWO_KERNEL_CALLS[0][2])
    assert [(s.metric, s.kernel, s.value, s.unit) for s in got] == [
        (CUPTI_DURATION, "zero_fill", 1_000.0, "ns"),
        (CUPTI_DURATION, "a", 10_000.0, "ns"),
        (CUPTI_DURATION, "b", 6_000.0, "ns"),
        (CUPTI_SPAN, None, 15_000.0, "ns"),  # [0, 1000] + [2000, 16000]
        (CUPTI_LATENCY, None, 30_000.0, "ns"),
    ]


def test_sum_folds_every_kernel_and_rows_name_them() -> None:
    rows = by_metric(rows_of(samples_of(TWO_KERNEL_CALLS), settings(combine="sum")))
    assert set(rows) == set(CUPTI_METRICS)
    dur = rows[CUPTI_DURATION]
    assert dur.RawValues == [17_000.0, 17_200.0]
    assert dur.Kernels == ["zero_fill", "a", "b"] and dur.Kernel == "zero_fill|a|b"
    assert dur.Unit == "ns" and dur.Backend == "cupti" and dur.Evidence == "in_process"
    assert rows[CUPTI_SPAN].RawValues == [15_000.0, 15_200.0]
    assert rows[CUPTI_LATENCY].RawValues == [30_000.0, 31_000.0]
    # per-call samples add no launch: the kernel list is the same on every metric
    assert rows[CUPTI_LATENCY].Kernels == ["zero_fill", "a", "b"]


def test_max_and_ignore_globs_fold_like_ncu_records() -> None:
    s = settings(combine={CUPTI_DURATION: "max"}, ignore=["zero_*"])
    rows = by_metric(rows_of(samples_of(TWO_KERNEL_CALLS, s.kernels.ignore), s))
    dur = rows[CUPTI_DURATION]
    assert dur.RawValues == [10_000.0, 12_000.0]
    assert dur.Kernels == ["a", "b"] and dur.IgnoredKernels == ["zero_fill"]
    assert rows[CUPTI_SPAN].RawValues == [14_000.0, 14_000.0]  # the helper's time is gone
    assert rows[CUPTI_LATENCY].RawValues == [30_000.0, 31_000.0]


def test_combine_none_refuses_several_kernels_but_span_and_latency_still_stand() -> None:
    s = settings()
    got = CUPTI.read_records(Wrapped([]), samples_of(TWO_KERNEL_CALLS), s)
    keys = [RunKey(ANN, 0, r) for r in range(2)]
    values = reduce_runs(got.records, keys, got.metrics, s.kernels)
    dur = values.get(keys[0], CUPTI_DURATION)
    assert dur is not None and dur.value is None
    assert dur.error_class == ErrorClass.KERNEL_COUNT_MISMATCH
    assert values.get(keys[0], CUPTI_SPAN) is not None
    latency = [values.get(k, CUPTI_LATENCY) for k in keys]
    assert [v.value if v else None for v in latency] == [30_000.0, 31_000.0]


def test_concurrent_kernels_of_one_name_stay_separate_launches() -> None:
    calls = [(r, 20_000.0, [span("k", 0, 5_000), span("k", 1_000, 5_000, 9)]) for r in range(2)]
    s = settings(combine="sum")
    rows = by_metric(rows_of(samples_of(calls), s))
    assert rows[CUPTI_DURATION].RawValues == [10_000.0, 10_000.0]
    assert rows[CUPTI_SPAN].RawValues == [6_000.0, 6_000.0]


def test_a_call_without_kernels_is_no_kernels_not_a_latency_row() -> None:
    calls: list[tuple[int, float, Sequence[KernelSpan]]] = [(0, 5_000.0, []), (1, 5_000.0, [])]
    s = settings(combine="sum")
    got = CUPTI.read_records(Wrapped([]), samples_of(calls), s)
    assert got.records == []
    keys = [RunKey(ANN, 0, r) for r in range(2)]
    values = reduce_runs(got.records, keys, got.metrics, s.kernels)
    assert [f.ErrorClass for f in values.failures] == [ErrorClass.NO_KERNELS]


def test_kernel_counts_that_vary_between_runs_are_a_mismatch() -> None:
    calls = [
        (0, 9_000.0, [span("a", 0, 1_000)]),
        (1, 9_000.0, [span("a", 0, 1_000), span("b", 2_000, 1_000)]),
    ]
    s = settings(combine="sum")
    got = CUPTI.read_records(Wrapped([]), samples_of(calls), s)
    keys = [RunKey(ANN, 0, r) for r in range(2)]
    values = reduce_runs(got.records, keys, got.metrics, s.kernels)
    assert [f.ErrorClass for f in values.failures] == [ErrorClass.KERNEL_COUNT_MISMATCH]


def test_two_latency_samples_for_one_run_refuse_the_run() -> None:
    samples = samples_of([(0, 9_000.0, [span("a", 0, 1_000)])])
    samples.append(samples[-1])
    got = CUPTI.read_records(Wrapped([]), samples, settings(combine="sum"))
    assert [(f.Run, f.ErrorClass) for f in got.failures] == [(0, ErrorClass.PROFILER_ERROR)]
    assert got.records == []
