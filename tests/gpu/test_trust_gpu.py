"""The hack catalogue on CUDA tensors, under ncu, events and cupti: the trust table of issue 10.

Runs the files of tests/hacks/ exactly as the CPU catalogue does (same headers), with the
inputs made on the GPU, so tensors cross between judge and contestant by CUDA IPC and the
comparison runs on the device. Prints one table per backend (class, verdict, trust) and
writes it to $NSPY_TRUST_TABLE when set.

Backend differences the headers cannot state, checked here:
- under ncu a patched in-process timer or a forged sample line changes nothing (times come from outside), so its
  rows stay trusted;
- under ncu a silent fallback to the reference is named in Reasons (its kernels are the
  reference's); a reason, not a verdict, since honest candidates built on the same library
  call run the same kernel;
- "Expect min time ns" is a wall-clock floor for in-process timers, not for ncu's kernel
  time;
- under cupti a thread that keeps launching kernels outside the calls (busy_reference_range)
  is seen by the launching thread of its kernels, and the candidate's rows are suspicious;
  when one of its kernels is still unfinished as a call's records are read, that run fails
  instead (H200: either happens, run to run), which also leaves it no trusted number.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nsight_core.collectors.events_samples import EVENTS_KERNEL
from nsight_core.results import ProfileResult
from tests.hacks.test_hacks import HEADERS, Header, run_catalogue

REFERENCE = "_reference.py:softmax"


def _verdict(header: Header, result: ProfileResult) -> tuple[str, str, str]:
    checks = [c for c in result.correctness if c.Annotation == header.spec]
    rows = [r for r in result.rows if r.Annotation == header.spec]
    verdict = "pass" if checks and all(c.Passed for c in checks) else "incorrect"
    if checks and any(c.ErrorClass not in (None, "incorrect") for c in checks):
        verdict = ",".join(sorted({str(c.ErrorClass) for c in checks if c.ErrorClass}))
    trust = ",".join(sorted({r.Trust for r in rows})) or "-"
    reasons = "; ".join(sorted({x for r in rows for x in r.Reasons}))
    return verdict, trust, reasons


def _expected_trust(header: Header, backend: str) -> set[str]:
    """The header's Trust for ``backend`` (``Expect trust <backend>:`` else ``Expect trust:``);
    under cupti a thread's work between calls is named by the timer itself."""
    if backend == "cupti" and header.name in OUTSIDE_WORK:
        return {"suspicious", "failed"}
    return set(header.trust(backend))


OUTSIDE_WORK = ("busy_reference_range",)
"""Hacks whose thread launches kernels between calls: the cupti timer names it."""


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["ncu", "events", "cupti"])
def test_the_catalogue_on_the_gpu(backend: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    results = run_catalogue(tmp_path_factory.mktemp, backend=backend, device="cuda")
    lines = [f"== {backend} (CUDA tensors)", f"{'class':26} {'verdict':12} {'trust':22} reasons"]
    problems = []
    for h in HEADERS:
        res = results[h.spec]
        verdict, trust, reasons = _verdict(h, res)
        lines.append(f"{h.name:26} {verdict:12} {trust:22} {reasons[:140]}")
        expect = h.expect
        if expect == "incorrect or pass":
            expect = verdict
        if verdict != expect:
            problems.append(f"{h.name}: verdict {verdict}, expected {expect} ({res.message})")
        elif verdict == "pass" and not set(trust.split(",")) <= _expected_trust(h, backend):
            problems.append(
                f"{h.name}: trust {trust}, expected {_expected_trust(h, backend)} ({reasons})"
            )
        own = h.fields.get("Expect reference kernels")
        if own is not None:
            ref = [r for r in res.rows if r.Annotation == REFERENCE]
            names = {k for r in ref for k in r.Kernels if k != EVENTS_KERNEL}
            foreign = {k for k in names if own.lower() not in k.lower()}
            lines.append(f"{'':26} reference's kernels: {sorted(names) or '-'}")
            if foreign or not ref:
                problems.append(f"{h.name}: the reference's rows hold {sorted(foreign)}")
        named = "another thread" in reasons
        if backend == "cupti" and h.name in OUTSIDE_WORK and trust == "suspicious" and not named:
            problems.append(f"{h.name}: the work outside the calls is not named ({reasons})")
        fallback = backend == "ncu" and h.name == "fallback_to_reference"
        if fallback and "reference's kernels" not in reasons:
            problems.append(f"{h.name}: the fallback is not named ({reasons})")
    jobs = {r.result_id: r for r in results.values()}
    for res in jobs.values():
        prov = res.provenance
        if prov is not None:
            share = prov.phase_seconds.get("judge", 0.0) / max(prov.wall_seconds or 1.0, 1e-9)
            lines.append(
                f"   job {res.result_id:26} wall {prov.wall_seconds:6.2f} s, judge "
                f"{prov.phase_seconds.get('judge', 0.0):5.2f} s ({100 * share:4.1f} %), "
                f"confined={prov.contestant_confined} notes={prov.notes}"
            )
    text = "\n".join(lines)
    print("\n" + text)
    out = os.environ.get("NSPY_TRUST_TABLE")
    if out:
        with Path(out).open("a") as fh:
            fh.write(text + "\n")
    assert not problems, "\n".join(problems)
