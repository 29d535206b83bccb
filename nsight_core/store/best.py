"""The best so far: per lineage, the best trusted candidate yet, and each new one's verdict.

One concept, for an agent's keep-or-revert decision: within a lineage (lineage.py: the same
reference and inputs, configs, backend, time metric and GPU), the store keeps the best
trusted candidate so far in ``best/<lineage>.json``, and every done job's result says, per
candidate, whether it beats that incumbent: `BestSoFar`.

- A candidate's score is its speedup against the reference in its own job, the geometric
  mean over configs, with an interval combined from the configs' 95 % intervals in the log
  (independent configs: the half-widths add in quadrature over the number of configs; one
  config keeps its comparison's interval exactly).
- It takes part only if it passed the check on every config, has a speedup with an interval
  on every config, and neither its rows nor the reference's are suspicious or failed.
- Against an incumbent measured in another job: 'yes' only when its lower bound clears the
  incumbent's upper bound by `DRIFT_MARGIN`, 'no' in the mirror case, else 'unresolved'.
  Both are speedups over the same reference, each in its own job, and each interval holds
  only its own job's run-to-run noise, not what moved between the jobs; the margin covers
  that drift and non-overlap is the conservative test. Ties and overlaps are 'unresolved',
  never a coin flip.
- When the incumbent's own code (same spec, same source hash) is profiled in this job too,
  the verdict comes from the runs paired in this job instead (incumbent time / candidate
  time, run by run): the same test as a comparison against the reference, noise floor
  included.
- 'noisy' rows take part: their wider intervals already make a verdict harder to reach
  (the rule every comparison follows: one that resolves despite noise stands), and a
  noisy incumbent's wide interval is a bar that a paired verdict (above) still clears.
- With no incumbent, a candidate qualifies ('first') when it is resolvably faster than the
  reference on every config (each comparison `Resolvable`). Of the candidates that read 'yes' or 'first', the fastest (by estimate, the
  request's order on a tie) becomes the best.

Several servers may share a store: the record is read, decided on and written under an
exclusive lock of its own, and written whole (`write_atomic`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nsight_core.request import ProfileRequest
from nsight_core.results import (
    BestCandidate,
    BestSoFar,
    BestVerdict,
    ProfileResult,
    iso,
    utc_now,
)
from nsight_core.rows.aggregate import CPU_DEVICE
from nsight_core.rows.stats import paired_ratio
from nsight_core.store.files import write_atomic
from nsight_core.store.lineage import Lineage, Sources, lineage_of, sources_of

try:  # POSIX: the record's lock; elsewhere one server per store is assumed.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

BEST_DIR = "best"
"""The store's folder of best-so-far records, one ``<lineage>.json`` each."""

RECORD_FORMAT = 1

DRIFT_MARGIN = 0.02
"""Relative gap two intervals from different jobs must leave to decide: a job's interval
holds its own run-to-run noise only, not the drift between jobs (host load, clocks,
temperature). The 2 % is the spread at which a row is 'noisy' (rows/aggregate.py): drift
below it is within what one job already calls stable."""


@dataclass(frozen=True)
class Score:
    """A speedup estimate and its 95 % interval."""

    speedup: float
    lo: float
    hi: float
    floor: float = 1.0
    """The runs' own noise as a factor (rows/stats.py `noise_floor`): a paired verdict
    must clear it, as a comparison's `Resolvable` does."""


def combined(parts: Sequence[Score]) -> Score:
    """The geometric mean of per-config scores, its interval combined in the log."""
    k = len(parts)
    logs = [(math.log(p.speedup), math.log(p.lo), math.log(p.hi)) for p in parts]
    mid = sum(s for s, _, _ in logs) / k
    down = math.sqrt(sum((s - lo) ** 2 for s, lo, _ in logs)) / k
    up = math.sqrt(sum((hi - s) ** 2 for s, _, hi in logs)) / k
    floor = max(p.floor for p in parts)
    return Score(math.exp(mid), math.exp(mid - down), math.exp(mid + up), floor)


@dataclass(frozen=True)
class Entry:
    """One candidate of the job, as the best-so-far sees it."""

    annotation: str
    score: Score | None
    """Against the reference, over configs; None when it cannot take part (`why`)."""
    why: str = ""
    faster: bool = False
    """Resolvably faster than the reference on every config (each comparison's
    `Resolvable`, noise floor included)."""


def _score(value: float | None, lo: float | None, hi: float | None) -> Score | None:
    if value is None or lo is None or hi is None or min(value, lo, hi) <= 0:
        return None
    return Score(value, lo, hi)


def entry_of(
    result: ProfileResult, cand: str, reference: str, n_configs: int, lineage: Lineage
) -> Entry:
    """Whether ``cand`` takes part (module docstring), and its score if so."""
    stage, metric = lineage.stage, lineage.metric
    checks = [c for c in result.correctness if c.Annotation == cand and c.Stage == stage]
    rows = [r for r in result.rows if r.Annotation == cand and r.Stage == stage]
    if any(not c.Passed for c in checks):
        return Entry(cand, None, why="failed the check")
    if not rows:
        return Entry(cand, None, why="not measured in the job's final stage")
    if {c.ConfigId for c in checks} != set(range(n_configs)):
        return Entry(cand, None, why="not checked on every config")
    timed = [r for r in rows if r.Metric == metric]
    ref = [r for r in result.rows if r.Annotation == reference and r.Stage == stage]
    worst = {r.Trust for r in timed} & {"suspicious", "failed"}
    if worst:
        return Entry(cand, None, why=f"its {metric} rows are {'/'.join(sorted(worst))}")
    if any(r.Trust in ("suspicious", "failed") for r in ref if r.Metric == metric):
        return Entry(cand, None, why="the reference's rows are suspicious or failed")
    mine = [
        c
        for c in result.comparisons
        if c.Annotation == cand and c.Metric == metric and c.Stage == stage
    ]
    scores = {
        c.ConfigId: _score(c.Speedup, c.Speedup_CI95_Lower, c.Speedup_CI95_Upper) for c in mine
    }
    per_config = [scores.get(i) for i in range(n_configs)]
    if any(s is None for s in per_config):
        return Entry(cand, None, why=f"no {metric} speedup with an interval on every config")
    resolved = {
        c.ConfigId for c in mine if c.Resolvable and c.Speedup is not None and c.Speedup > 1
    }
    faster = resolved == set(range(n_configs))
    return Entry(cand, combined([s for s in per_config if s is not None]), faster=faster)


def paired_with_best(
    result: ProfileResult, best: str, cand: str, n_configs: int, lineage: Lineage
) -> Score | None:
    """``cand``'s speed over ``best``'s from this job's runs paired by index, over configs."""
    raw = {
        (r.Annotation, r.ConfigId): r.RawValues
        for r in result.rows
        if r.Metric == lineage.metric and r.Stage == lineage.stage
    }
    on_cpu = any(r.GPU == CPU_DEVICE for r in result.rows)
    parts = []
    for cid in range(n_configs):
        pairs = [
            (b, c)
            for b, c in zip(raw.get((best, cid), []), raw.get((cand, cid), []), strict=False)
            if b is not None and c is not None
        ]
        ratio = paired_ratio([b for b, _ in pairs], [c for _, c in pairs], floored=on_cpu)
        score = _score(ratio.estimate, *(ratio.ci or (None, None)))
        if score is None:
            return None
        parts.append(Score(score.speedup, score.lo, score.hi, ratio.floor))
    return combined(parts)


Verdict = Literal["yes", "no", "unresolved"]


def _decide(vs: Score, margin: float) -> Verdict:
    gap = math.log1p(margin)
    if math.log(vs.lo) > gap:
        return "yes"
    if math.log(vs.hi) < -gap:
        return "no"
    return "unresolved"


_MARGIN = f"{DRIFT_MARGIN:.0%} drift margin"
_WHY: dict[tuple[Verdict, bool], str] = {
    ("yes", False): f"its interval lies above the best's, across jobs ({_MARGIN})",
    ("no", False): f"its interval lies below the best's, across jobs ({_MARGIN})",
    ("unresolved", False): (
        "within noise of the best across jobs: profile it beside the best's code in one "
        "job for a paired verdict"
    ),
    ("yes", True): "faster than the best, runs paired in this job",
    ("no", True): "slower than the best, runs paired in this job",
    ("unresolved", True): "within noise of the best, runs paired in this job",
}


def _absent(annotation: str, why: str) -> BestVerdict:
    return BestVerdict(annotation=annotation, beats_best=None, speedup=None, vs_best=None, why=why)


def _against(
    entry: Entry, score: Score, incumbent: BestCandidate | None, paired: Score | None
) -> tuple[Verdict | Literal["first"] | None, float | None, str]:
    if incumbent is None:
        if entry.faster:
            return "first", None, "trusted and resolvably faster than the reference: the first best"
        return None, None, "not resolvably faster than the reference"
    if paired is not None:
        vs, verdict = paired, _decide(paired, paired.floor - 1.0)
    else:
        best = Score(incumbent.speedup, incumbent.ci95_lower, incumbent.ci95_upper)
        vs = Score(score.speedup / best.speedup, score.lo / best.hi, score.hi / best.lo)
        verdict = _decide(vs, DRIFT_MARGIN)
    return verdict, vs.speedup, _WHY[(verdict, paired is not None)]


def verdict_of(entry: Entry, incumbent: BestCandidate | None, paired: Score | None) -> BestVerdict:
    """``entry``'s verdict against ``incumbent`` (``paired``: measured beside it here)."""
    score = entry.score
    if score is None:
        return _absent(entry.annotation, f"cannot take part: {entry.why}")
    beats, vs, why = _against(entry, score, incumbent, paired)
    return BestVerdict(
        annotation=entry.annotation,
        beats_best=beats,
        speedup=score.speedup,
        ci95_lower=score.lo,
        ci95_upper=score.hi,
        vs_best=vs,
        why=why,
    )


def judge_job(
    request: ProfileRequest,
    result: ProfileResult,
    sources: Sources,
    lineage: Lineage,
    incumbent: BestCandidate | None,
) -> tuple[list[BestVerdict], BestCandidate | None]:
    """Every candidate's verdict, and the new best if one qualifies (else None)."""
    n = len(request.configs)
    entries = [entry_of(result, c, request.reference, n, lineage) for c in request.candidates]
    rerun = None
    if incumbent is not None and incumbent.source_sha256 is not None:
        rerun = next(
            (
                e.annotation
                for e in entries
                if e.annotation == incumbent.annotation
                and e.score is not None
                and sources.candidates.get(e.annotation) == incumbent.source_sha256
            ),
            None,
        )
    verdicts = []
    for entry in entries:
        if entry.annotation == rerun:
            verdicts.append(_absent(entry.annotation, "the best so far itself, measured again"))
            continue
        paired = (
            paired_with_best(result, rerun, entry.annotation, n, lineage)
            if rerun is not None and entry.score is not None
            else None
        )
        verdicts.append(verdict_of(entry, incumbent, paired))
    scores = {e.annotation: e.score for e in entries if e.score is not None}
    winners = [
        (scores[v.annotation], v.annotation)
        for v in verdicts
        if v.beats_best in ("yes", "first") and v.annotation in scores
    ]
    if not winners:
        return verdicts, None
    top, name = max(winners, key=lambda w: w[0].speedup)  # max keeps the first of equals
    best = BestCandidate(
        annotation=name,
        source_sha256=sources.candidates.get(name),
        speedup=top.speedup,
        ci95_lower=top.lo,
        ci95_upper=top.hi,
        result_id=result.result_id,
        since=iso(utc_now()),
    )
    return verdicts, best


# -- the record --------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    if fcntl is None:  # pragma: no cover - Windows
        yield
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # blocks while another server decides
        yield
    finally:
        os.close(fd)  # closing the descriptor drops the flock


def read_record(path: Path) -> BestCandidate | None:
    """The incumbent a record holds; a record that is unreadable is moved aside (logged)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return BestCandidate.model_validate(data["best"])
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        broken = path.with_name(f"{path.name}.broken-{int(time.time())}")
        log.warning("best-so-far record %s unreadable (%s); moved to %s", path, exc, broken)
        with contextlib.suppress(OSError):
            os.replace(path, broken)
        return None


def best_so_far(
    root: Path, request: ProfileRequest, result: ProfileResult, sources: Sources
) -> BestSoFar:
    """Decide this done job's verdicts against its lineage's best, and keep the new best."""
    lineage = lineage_of(request, result, sources)
    folder = root / BEST_DIR
    folder.mkdir(exist_ok=True)
    path = folder / f"{lineage.id}.json"
    with _locked(folder / f".{lineage.id}.lock"):
        incumbent = read_record(path)
        verdicts, new = judge_job(request, result, sources, lineage, incumbent)
        if new is not None:
            record = {
                "format": RECORD_FORMAT,
                "lineage": lineage.id,
                "parts": lineage.parts,
                "best": new.model_dump(mode="json"),
            }
            write_atomic(path, json.dumps(record, indent=1))
    return BestSoFar(
        lineage=lineage.id,
        incumbent=incumbent,
        verdicts=verdicts,
        new_best=None if new is None else new.annotation,
    )


def best_text(best: BestSoFar) -> str:
    """One sentence for the result's message: what changed, and the verdicts that matter."""
    inc = best.incumbent
    if best.new_best is not None:
        was = f", replacing {inc.annotation!r}" if inc is not None else ""
        return f"Best so far: {best.new_best!r} is the new best of this lineage{was}."
    if inc is None:
        return (
            "Best so far: none yet (no candidate was trusted and resolvably faster than "
            "the reference)."
        )
    said = [f"{v.annotation!r} {v.beats_best}" for v in best.verdicts if v.beats_best]
    also = f" ({'; '.join(said)})" if said else ""
    return (
        f"Best so far: {inc.annotation!r} ({inc.speedup:.3g}x the reference, result "
        f"{inc.result_id}) stays the best{also}."
    )


def with_best_so_far(
    root: Path, request: ProfileRequest, result: ProfileResult, sources: Sources | None
) -> ProfileResult:
    """A done result with its ``best_so_far`` and the sentence that says it (`best_text`);
    other results as they are. ``sources``: as hashed when the job was queued (hashed now
    when that is lost). A record that cannot be written costs the field, never the result."""
    if result.status != "done":
        return result
    try:
        best = best_so_far(root, request, result, sources or sources_of(request))
    except OSError as exc:
        log.warning("no best-so-far for %s: %s", result.result_id, exc)
        return result
    said = result.message.rstrip()
    said += "." if said and not said.endswith((".", "!", "?")) else ""
    message = f"{said} {best_text(best)}".strip()
    return result.model_copy(update={"best_so_far": best, "message": message})
