"""Work outside the timed ranges and forged ranges under ncu (issue 26, classes 3 and 4):
`ranges.classify` over report actions in launch order, as extract.py reads them from a
report, against the calls the judge issued.

The actions are built here: the logic under test is the sorting of a report's kernels, not
ncu (tests/gpu/test_ncu_ranges_gpu.py runs the hacks under ncu on a GPU).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from nsight_core.collectors.extract import ActionInfo
from nsight_core.collectors.ncu import (
    NvtxFilter,
    _nvtx_filter,
    build_ncu_command,
    records_from_report,
)
from nsight_core.collectors.ranges import (
    CALLS_FILE,
    Finding,
    IssuedCall,
    IssuedCalls,
    classify,
    read_issued,
    write_issued,
)
from nsight_core.errors import ErrorClass
from nsight_core.protocol import (
    NCU_NVTX_EXCLUDE,
    NCU_NVTX_INCLUDE,
    NCU_NVTX_INCLUDE_TIMED,
    RunKey,
    parse_range_name,
    untimed_range_name,
)
from nsight_core.results import Failure
from nsight_core.rows.assemble import _with_findings
from nsight_core.runtime.early_cuda import PRIME_KERNEL
from tests.conftest import NCU_DATA

REF, CAND = "_reference.py:softmax", "hack.py:candidate"
N = [f"{i:016x}" for i in range(1, 20)]


def _calls() -> list[IssuedCall]:
    """The reference's untimed call and two timed runs, then the candidate's."""
    return [
        IssuedCall(N[0], REF, 0, None),
        IssuedCall(N[1], REF, 0, 0),
        IssuedCall(N[2], REF, 0, 1),
        IssuedCall(N[3], CAND, 0, None),
        IssuedCall(N[4], CAND, 0, 0),
        IssuedCall(N[5], CAND, 0, 1),
    ]


def _timed(call: IssuedCall) -> str:
    assert call.run is not None
    return "nspy@" + RunKey(call.annotation, call.config_id, call.run).range_name(call.nonce)


def _harness(call: IssuedCall) -> str:
    assert call.run is not None
    key = RunKey(call.annotation, call.config_id, call.run)
    return "nspy@" + key.harness_range_name(call.nonce)


class _Report:
    """Actions in launch order, as extract.py makes them (key from the range names)."""

    def __init__(self) -> None:
        self.actions: list[ActionInfo] = []

    def add(self, kernel: str, *ranges: str, demangled: str | None = None) -> int:
        keys = {k for r in ranges if (k := _key(r)) is not None}
        seq = len(self.actions)
        key = keys.pop() if len(keys) == 1 else None
        self.actions.append(
            ActionInfo(seq, kernel, demangled or kernel, "kernel", tuple(ranges), key)
        )
        return seq


def _key(r: str) -> RunKey | None:
    if not r.startswith("nspy@") or r.endswith("/"):
        return None
    parsed = parse_range_name(r.removeprefix("nspy@"))
    return None if parsed is None else parsed[0]


def _honest(rep: _Report, calls: list[IssuedCall]) -> None:
    for c in calls:
        if c.run is None:
            continue  # an untimed call leaves nothing in the report (NCU_NVTX_EXCLUDE)
        rep.add("softmax_kernel", _timed(c))


def test_range_names_carry_the_nonce_and_stay_readable_without_it() -> None:
    key = RunKey("mod.py:fn:with:colons", 2, 7)
    assert parse_range_name(key.range_name(N[0])) == (key, N[0])
    assert parse_range_name(key.range_name()) == (key, None)  # the @kernel API's names
    assert RunKey.from_range_name(key.range_name(N[0])) == key
    assert RunKey.from_range_name(key.harness_range_name(N[0])) is None
    assert RunKey.from_range_name(untimed_range_name("a", 0, N[0])) is None
    with pytest.raises(ValueError):
        key.range_name("not-a-nonce")


def test_request_jobs_profile_all_but_untimed_calls_and_kernel_jobs_keep_the_include() -> None:
    def flags(nvtx: NvtxFilter) -> list[str]:
        return build_ncu_command(
            "ncu",
            metrics=["gpu__time_duration.sum"],
            cache_control="all",
            clock_control="none",
            replay_mode="kernel",
            report_path="r",
            log_path="l",
            target_argv=["python"],
            nvtx=nvtx,
        )

    judged = flags("all_but_untimed")
    assert judged[judged.index("--nvtx-exclude") + 1] == NCU_NVTX_EXCLUDE
    assert "--nvtx-include" not in judged
    assert NCU_NVTX_EXCLUDE == "regex:nspy@^u:.*"
    kept: list[tuple[NvtxFilter, str]] = [
        ("ranges", NCU_NVTX_INCLUDE),
        ("timed", NCU_NVTX_INCLUDE_TIMED),
    ]
    for nvtx, include in kept:
        plain = flags(nvtx)
        assert plain[plain.index("--nvtx-include") + 1] == include
        assert "--nvtx-exclude" not in plain
    # What the backend picks: a request job's contestant, under kernel or range replay; an
    # @kernel job's (its argv names --function).
    request = ["python", "-P", "-m", "nsight_core.contestant", "/tmp/x", "range"]
    assert _nvtx_filter(request, "kernel") == "all_but_untimed"
    assert _nvtx_filter(request, "application") == "all_but_untimed"
    assert _nvtx_filter(request, "range") == "timed"
    assert _nvtx_filter([*request[:4], "--function", "/tmp/job"], "kernel") == "ranges"
    # The timed filter's regex keeps timed ranges and not the harness's.
    timed = re.compile(NCU_NVTX_INCLUDE_TIMED.split("@", 1)[1])
    assert timed.search(RunKey("a:u:b", 0, 1).range_name(N[0]))
    assert not timed.search(RunKey("a", 0, 1).harness_range_name(N[0]))
    assert not timed.search(untimed_range_name("a", 0, N[0]))
    untimed = re.compile(NCU_NVTX_EXCLUDE.split("@", 1)[1])
    assert untimed.search(untimed_range_name("a", 0, N[0]))
    assert not untimed.search(RunKey("menu:u:fn", 0, 1).range_name(N[0]))


def test_honest_calls_count_and_find_nothing() -> None:
    calls, rep = _calls(), _Report()
    for c in calls:
        if c.run is not None:
            rep.add("copy_in", _harness(c), demangled="at::native::direct_copy_kernel_cuda")
            rep.add("softmax_kernel", _timed(c))
            rep.add("exp_kernel", _timed(c))
            rep.add("equal", _harness(c), demangled="CompareEqFunctor<float>")
            rep.add("all", _harness(c), demangled="reduce_kernel<and_kernel_cuda>")
    # A candidate's own NVTX ranges (push/pop, another domain) change nothing.
    rep.add("softmax_kernel", _timed(calls[5]), "mine@inner/", "nspy@mine/")
    got = classify(rep.actions, calls)
    assert got.findings == []
    timed = [a for a in rep.actions if any(r.startswith("nspy@c") for r in a.nvtx_ranges)]
    assert {a.seq for a in timed} == set(got.keys)
    assert all(got.keys[a.seq] == a.key for a in timed)


def test_work_outside_the_timed_range_names_the_call_window() -> None:
    calls, rep = _calls(), _Report()
    _honest(rep, calls[:3])
    rep.add("softmax_kernel", _timed(calls[4]))
    after = rep.add("real_work", demangled="real_work(float*)")  # before the output copy
    rep.add("copy_out", _harness(calls[4]), demangled="direct_copy_kernel_cuda")
    rep.add("real_work", _harness(calls[5]))  # during the harness's own work: not a copy
    rep.add("softmax_kernel", _timed(calls[5]))
    got = classify(rep.actions, calls)
    assert len(got.findings) == 1
    f = got.findings[0]
    assert (f.kind, f.annotations, f.count, f.kernels) == ("foreign", (CAND,), 2, ["real_work"])
    suspects = got.suspects()
    assert [s.annotation for s in suspects] == [CAND]
    assert "outside the harness's timed ranges" in suspects[0].reason
    assert not suspects[0].in_process_only
    assert after not in got.keys  # the foreign kernel counts for no run


def test_work_between_calls_names_the_candidates_around_it_and_none_names_every_row() -> None:
    other = "other.py:candidate"
    calls = [*_calls(), IssuedCall(N[6], other, 0, 0), IssuedCall(N[7], CAND, 0, 2)]
    rep = _Report()
    rep.add("early", demangled="early")  # before any call: the window of the one after it
    _honest(rep, calls[:3])
    rep.add("after_reference", demangled="after_reference")
    _honest(rep, calls[3:6])
    rep.add("between", demangled="between")
    _honest(rep, calls[6:])
    got = classify(rep.actions, calls)
    by = {f.kernels[0]: f for f in got.findings}
    assert by["early"].annotations == (REF,)
    # The reference's calls all came before any candidate existed: the candidate's doing.
    assert by["after_reference"].annotations == (CAND,)
    assert by["between"].annotations == tuple(sorted((CAND, other)))
    assert "one of them" in by["between"].reason()
    lone = _Report()
    lone.add("stray")
    alone = classify(lone.actions, calls)
    assert [s.annotation for s in alone.suspects()] == [None]  # every row of the job


def test_forged_ranges_are_dropped_and_reported() -> None:
    calls, rep = _calls(), _Report()
    _honest(rep, calls[:3])
    ref_run0 = RunKey(REF, 0, 0)
    rep.add("softmax_kernel", _timed(calls[4]))
    # Padding the reference's run 0: without a nonce, with the candidate's own nonce, and
    # with the reference's real nonce replayed after a later call (out of order).
    no_nonce = rep.add("pad", "nspy@" + ref_run0.range_name())
    wrong_pair = rep.add("pad", "nspy@" + ref_run0.range_name(calls[4].nonce))
    replayed = rep.add("pad", _timed(calls[1]))
    # Nested in the candidate's own timed range: counts for it, the range is still named.
    nested = rep.add("softmax_kernel", _timed(calls[5]), "nspy@" + ref_run0.range_name())
    got = classify(rep.actions, calls)
    assert no_nonce not in got.keys and wrong_pair not in got.keys and replayed not in got.keys
    assert got.keys[nested] == RunKey(CAND, 0, 1)
    [f] = got.findings
    assert (f.kind, f.annotations, f.count) == ("forged", (CAND,), 4)
    assert f.ranges and all(REF in r for r in f.ranges)
    assert "did not open" in f.reason()
    # The reference's own runs keep exactly their kernels.
    assert sorted(k.run for k in got.keys.values() if k.annotation == REF) == [0, 1]


def test_a_kernel_in_two_runs_ranges_at_once_is_a_finding_not_a_crash() -> None:
    calls, rep = _calls(), _Report()
    _honest(rep, calls[:3])
    both = rep.add("softmax_kernel", _timed(calls[4]), _timed(calls[5]))
    got = classify(rep.actions, calls)
    assert both not in got.keys
    assert [f.kind for f in got.findings] == ["forged"]


def test_an_ended_range_leaves_the_rest_of_the_call_outside() -> None:
    # The candidate ends the harness's range early: its remaining kernels are in none.
    calls, rep = _calls(), _Report()
    _honest(rep, calls[:3])
    rep.add("tiny", _timed(calls[4]))
    rep.add("heavy")
    rep.add("heavy")
    rep.add("tiny", _timed(calls[5]))
    got = classify(rep.actions, calls)
    [f] = got.findings
    assert (f.kind, f.annotations, f.count) == ("foreign", (CAND,), 2)


def test_a_candidate_whose_every_kernel_ran_outside_its_ranges_is_named_not_the_reference() -> None:
    # H200: a candidate that ends its timed range first leaves no kernel in any range of its
    # own, and its harness ranges hold none either (contiguous inputs, no copy): its work
    # follows the reference's last call with nothing placed after it. That work is the
    # candidate's (issued after the reference's calls), never the reference's.
    calls, rep = _calls(), _Report()
    _honest(rep, calls[:3])
    rep.add("softmax_kernel")
    rep.add("softmax_kernel")
    got = classify(rep.actions, calls)
    [f] = got.findings
    assert (f.kind, f.annotations, f.count) == ("foreign", (CAND,), 2)
    # With an honest candidate after it, both candidates are named (one of them), and the
    # honest one is not blamed alone as when only the neighbours counted.
    other = "other.py:candidate"
    more = [*calls, IssuedCall(N[6], other, 0, None), IssuedCall(N[7], other, 0, 0)]
    rep2 = _Report()
    _honest(rep2, more[:3])
    rep2.add("softmax_kernel")
    _honest(rep2, more[6:])
    [g] = classify(rep2.actions, more).findings
    assert g.annotations == tuple(sorted((CAND, other)))
    failure = Failure(
        Annotation=CAND, ConfigId=0, ErrorClass=ErrorClass.NO_KERNELS, Error="no kernel"
    )
    [named] = _with_findings([failure], got.suspects())
    assert "ran outside the harness's timed ranges" in named.Error


def test_issued_calls_round_trip_and_a_missing_file_means_no_classification(
    tmp_path: Path,
) -> None:
    path = tmp_path / CALLS_FILE
    assert read_issued(path) is None
    write_issued(path, _calls())
    assert read_issued(path) == IssuedCalls(_calls(), primed=False)
    write_issued(path, _calls(), primed=True)
    assert read_issued(path) == IssuedCalls(_calls(), primed=True)
    path.write_text("not json\n")
    assert read_issued(path) is None


def test_the_prime_counts_for_nothing_only_as_the_first_result_of_a_primed_contestant() -> None:
    """The contestant's prime (early_cuda.py) is left out when its first hello said it ran
    and it is the report's first result; anywhere else a kernel of its name is foreign work,
    and so is the first result when the hello said nothing of a prime."""
    calls = _calls()
    rep = _Report()
    rep.add(PRIME_KERNEL)
    _honest(rep, calls)
    primed = classify(rep.actions, calls, primed=True)
    assert primed.findings == []
    assert sorted(primed.keys) == [a.seq for a in rep.actions[1:]]
    [unsaid] = classify(rep.actions, calls).findings
    assert unsaid.kind == "foreign" and unsaid.kernels == [PRIME_KERNEL]

    later = _Report()
    _honest(later, calls[:3])
    later.add(PRIME_KERNEL)  # in the candidate's window, after the reference's calls
    _honest(later, calls[3:])
    [found] = classify(later.actions, calls, primed=True).findings
    assert found.kind == "foreign" and found.annotations == (CAND,)

    ranged = _Report()  # a first kernel of that name in a timed range is that call's
    ranged.add(PRIME_KERNEL, _timed(calls[1]))
    assert classify(ranged.actions, calls, primed=True).keys == {0: ranged.actions[0].key}


def test_a_recorded_report_read_with_the_judges_calls(
    manifest: dict[str, Any], tmp_path: Path
) -> None:
    # A real report (tools/record_fixtures.py) whose ranges carry no nonce: read alone (an
    # @kernel job, a report made elsewhere) every kernel counts; beside the calls a judge
    # issued, none of its ranges is one the judge opened, so none counts; and no call's
    # window can be named, so every row of the job says why.
    entry = manifest["one_kernel"]
    if not entry.get("report"):
        pytest.skip("one_kernel was not recorded")
    report = tmp_path / "report.ncu-rep"
    shutil.copy(NCU_DATA / entry["report"], report)
    alone = records_from_report(report, entry["metrics"])
    assert alone.records and not alone.suspects
    keys = [RunKey(e["annotation"], e["config_id"], e["run"]) for e in entry["expected"]]
    issued = [IssuedCall(N[i], k.annotation, k.config_id, k.run) for i, k in enumerate(keys)]
    write_issued(report.with_name(CALLS_FILE), issued)
    judged = records_from_report(report, entry["metrics"])
    assert judged.records == []
    assert judged.suspects
    assert all("did not open" in s.reason for s in judged.suspects)
    assert [s.annotation for s in judged.suspects] == [None]


def test_a_count_failure_names_the_finding_in_the_same_call_windows() -> None:
    """A candidate that ends its range early profiles no kernel in it: its no_kernels failure
    says its kernels ran outside the ranges, not only that none was seen."""
    finding = Finding("foreign", ("c.py:f",), count=3, kernels=["softmax_warp_forward"])
    empty = Failure(Annotation="c.py:f", ConfigId=0, ErrorClass=ErrorClass.NO_KERNELS, Error="none")
    other = Failure(Annotation="r.py:g", ConfigId=0, ErrorClass=ErrorClass.NO_KERNELS, Error="none")
    crash = Failure(Annotation="c.py:f", ConfigId=1, ErrorClass=ErrorClass.CRASHED, Error="died")
    got = _with_findings([empty, other, crash], finding.suspects())
    assert got[0].Error.startswith("none; under ncu, 3 kernels ran outside")
    assert got[1:] == [other, crash]
