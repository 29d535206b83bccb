"""A finished run -> ProfileResult: records from the backend, then rows, then the verdicts.

The stage after the job's processes. It trusts no number from the contestant: the backend
reads its own records (an ncu report, or raw per-run samples the judge relayed), statistics
are computed here (aggregate.py), and what the judge found suspect is applied to rows:

- a rebound timer or harness function makes every in-process row suspicious;
- a rebound framework function, a shadowing file or a reference that disagreed with itself
  makes every row suspicious;
- under an external profiler, a candidate that launched exactly the reference's kernels is
  named (a fallback to the reference looks like any other candidate otherwise).

`finish_result` is the one finishing step of request jobs and `@kernel` jobs.

Messages are built from the failures recorded, never from a fixed sentence: each names the
phase a callable failed in (import, the correctness check, warm-up, its timed runs) and
its class, and a failure of the reference (or the input maker) comes first, since no
candidate can be judged where the reference failed.
"""

from __future__ import annotations

import platform
import re
import socket
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from nsight_core.collectors import get_backend
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.protocol import CheckEvent, FailureEvent, RunKey, SuspectEvent
from nsight_core.request import ProfileRequest
from nsight_core.results import (
    Comparison,
    Correctness,
    Failure,
    JobStatus,
    ProfileResult,
    Provenance,
    Row,
    iso,
    suspected,
    utc_now,
)
from nsight_core.rows.aggregate import (
    RowContext,
    RunValues,
    aggregate_rows,
    compare_to_reference,
    reduce_runs,
)
from nsight_core.rows.diagnose import JobDiagnosis, apply_floor, diagnose_run
from nsight_core.rows.runs import JobRun
from nsight_core.settings import JobSettings

_FRAME_RE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)', re.MULTILINE)
_HARNESS_DIRS = tuple(
    str(Path(__file__).resolve().parents[2] / name) + "/" for name in ("nsight_core", "nspy_mcp")
)
_LIBRARY_DIRS = tuple(
    sorted(
        str(Path(path)) + "/"
        for key, path in sysconfig.get_paths().items()
        if key in ("stdlib", "platstdlib", "purelib", "platlib")
    )
)
_LIBRARY_PARTS = ("/site-packages/", "/dist-packages/")


def _frame_kind(file: str) -> int:
    """0: the user's code; 1: an installed library or the stdlib; 2: ours or no file.

    Matched by path and by folder name too, so a traceback written on another host (a
    Dask worker with its own environment) is read the same way."""
    if file.startswith("<") or file.startswith(_HARNESS_DIRS):
        return 2
    if any(f"/{name}/" in file for name in ("nsight_core", "nspy_mcp")):
        return 2
    if file.startswith(_LIBRARY_DIRS) or any(part in file for part in _LIBRARY_PARTS):
        return 1
    return 0


def user_frame(traceback_text: str) -> tuple[str, int] | None:
    """File and line of the innermost frame of the user's code in a formatted traceback.

    The harness's own frames (the judge, the contestant, the loader) are never where a
    candidate's fix lies, and a library's frame hides the user's line that called it; a
    library frame is used only when no user frame exists (a candidate installed as a
    package). In a chained traceback the last block is innermost, so the last match wins."""
    best: dict[int, tuple[str, int]] = {}
    for m in _FRAME_RE.finditer(traceback_text):
        best[_frame_kind(m["file"])] = (m["file"], int(m["line"]))
    return best.get(0) or best.get(1)


def _located(ev: FailureEvent) -> tuple[str | None, int | None]:
    """The event's file and line, or the traceback's user frame where those are missing,
    point into the harness or a library, or name no line (an OSError's `filename` is the
    file it could not open, not code). A syntax error keeps its own file: that file is
    where the fix lies."""
    if ev.file is not None and (
        ev.error_class == ErrorClass.COMPILE_ERROR
        or (ev.line is not None and _frame_kind(ev.file) == 0)
    ):
        return ev.file, ev.line
    found = user_frame(ev.traceback)
    if found is None:
        return ev.file, ev.line
    return found


def failure_of_event(ev: FailureEvent) -> Failure:
    file, line = _located(ev)
    return Failure(
        Annotation=ev.annotation,
        ConfigId=ev.config_id,
        Run=ev.run,
        Phase=ev.phase,
        ErrorClass=ev.error_class,
        Error=ev.message,
        Traceback=ev.traceback,
        File=file,
        Line=line,
    )


def failure_of_error(err: NsightCoreError, phase: str | None = None) -> Failure:
    return Failure(ErrorClass=err.error_class, Error=err.message, Hint=err.hint, Phase=phase)


def refused(err: NsightCoreError, *, result_id: str, created_at: str) -> ProfileResult:
    """The result of a request refused before anything ran (its preflight)."""
    return ProfileResult(
        result_id=result_id,
        status="failed",
        message=f"{err.error_class}: {err}",
        created_at=created_at,
        finished_at=iso(utc_now()),
        error=failure_of_error(err, "preflight"),
    )


def correctness_of(request: ProfileRequest, checks: Sequence[CheckEvent]) -> list[Correctness]:
    return [
        Correctness(
            Annotation=c.annotation,
            ConfigId=c.config_id,
            Params=request.configs[c.config_id] if c.config_id < len(request.configs) else {},
            Passed=c.passed,
            Seeds=c.seeds,
            MaxAbsError=c.max_abs_error,
            MaxRelError=c.max_rel_error,
            MismatchCount=c.mismatch_count,
            FirstBadIndex=c.first_bad_index,
            Reasons=c.reasons,
            ErrorClass=c.error_class,
            Error=c.message,
        )
        for c in checks
    ]


def _package_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def provenance_of(run: JobRun, settings: JobSettings, gpu: str | None) -> Provenance:
    done = run.events.done
    applies = get_backend(settings.backend).settings_apply
    return Provenance(
        backend=run.backend,
        gpu=gpu or (done.device if done else None),
        ncu_version=run.wrapped.tool_version,
        ncu_report_version=_package_version("ncu-report"),
        nspy_version=_package_version("nspy-mcp") or "0.0.0+unknown",
        python=platform.python_version(),
        host=socket.gethostname(),
        cache_control=settings.cache_control if applies else None,
        clock_control=settings.clock_control if applies else None,
        replay_mode=settings.replay_mode if applies else None,
        command=run.wrapped.argv,
        phase_seconds=dict(done.phase_seconds) if done else {},
        wall_seconds=round(run.wall_s, 3),
        contestant_confined=done.confined if done else None,
        notes=list(done.notes) if done else [],
    )


@dataclass(frozen=True)
class Collected:
    """Per-run values of a finished run, and every failure found on the way."""

    values: RunValues
    failures: list[Failure]
    gpu: str | None


def collect_values(run: JobRun, settings: JobSettings) -> Collected:
    """The run's events and the backend's records -> one value per run and metric."""
    ev = run.events
    failures = [failure_of_event(f) for f in ev.failures]
    if ev.bad_lines:
        failures.append(
            Failure(
                ErrorClass=ErrorClass.PROFILER_ERROR,
                Error=f"{ev.bad_lines} event line(s) could not be parsed",
                Phase="collect",
            )
        )
    expected = list(dict.fromkeys(RunKey(r.annotation, r.config_id, r.run) for r in ev.ranges))
    got = get_backend(settings.backend).read_records(run.wrapped, ev.samples, settings)
    gpu = got.gpu or (ev.done.device if ev.done else None)
    failures += got.failures
    run_failures = [f for f in failures if f.Run is not None or f.Phase == "profile"]
    values = reduce_runs(
        got.records,
        expected,
        got.metrics,
        settings.kernels,
        failures=run_failures,
        combine_fn=settings.combine_fn,
    )
    failures += [f for f in values.failures if f not in failures]
    # Timed runs of a candidate that later failed its check are withheld by the judge;
    # the profiler still saw their kernels, which is no violation.
    failed = {(c.annotation, c.config_id) for c in ev.checks if not c.passed}
    for key in values.unexpected_keys:
        if (key.annotation, key.config_id) in failed:
            continue
        failures.append(
            Failure(
                Annotation=key.annotation,
                ConfigId=key.config_id,
                Run=key.run,
                ErrorClass=ErrorClass.PROFILER_ERROR,
                Error="kernels were attributed to a run nobody reported; ignored",
                Phase="collect",
            )
        )
    return Collected(values, failures, gpu)


def row_context(
    settings: JobSettings, configs: Sequence[Mapping[str, Any]], gpu: str | None
) -> RowContext:
    """The settings every row records; a profiler's own settings only where they apply."""
    backend = get_backend(settings.backend)
    applies = backend.settings_apply
    return RowContext(
        configs=configs,
        backend=backend.name,
        evidence=backend.evidence,
        gpu=gpu,
        cache_control=settings.cache_control if applies else None,
        clock_control=settings.clock_control if applies else None,
        replay_mode=settings.replay_mode if applies else None,
        check_enabled=settings.check_enabled,
        requested_runs=settings.runs,
    )


def apply_suspects(rows: list[Row], suspects: Sequence[SuspectEvent], evidence: str) -> list[Row]:
    """Rows made suspicious by what the judge found (see the module docstring)."""
    for s in suspects:
        if s.in_process_only and evidence != "in_process":
            continue
        rows = [suspected(r, s.reason) if s.annotation in (None, r.Annotation) else r for r in rows]
    return rows


def _noted(row: Row, reason: str) -> Row:
    if reason in row.Reasons:
        return row
    return row.model_copy(update={"Reasons": [*row.Reasons, reason]})


def flag_reference_kernels(rows: list[Row], reference: str) -> list[Row]:
    """Name candidates whose kernels are exactly the reference's, per config and metric.

    A reason, not a verdict: a candidate built on the same library call (a chunked
    torch.softmax) legitimately runs the reference's kernel, and on the H200 two such
    controls would otherwise have been made suspicious. The name makes a silent fallback
    visible; the agent decides whether it meant it."""
    ref = {(r.ConfigId, r.Metric): set(r.Kernels) for r in rows if r.Annotation == reference}
    out = []
    for r in rows:
        kernels = ref.get((r.ConfigId, r.Metric))
        if r.Annotation != reference and kernels and set(r.Kernels) == kernels:
            names = ", ".join(sorted(kernels))[:300]
            r = _noted(
                r,
                f"launches exactly the reference's kernels ({names}): a fallback to the "
                "reference, not a new kernel?",
            )
        out.append(r)
    return out


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _summary(rows: Sequence[Row], checks: int, passed: int, failures: int) -> str:
    trust: dict[str, int] = {}
    for r in rows:
        trust[r.Trust] = trust.get(r.Trust, 0) + 1
    kinds = ", ".join(f"{n} {t}" for t, n in sorted(trust.items()))
    parts = [_plural(len(rows), "row") + (f" ({kinds})" if kinds else "")]
    if checks:
        parts.append(f"{passed}/{checks} candidate-config checks passed")
    if failures:
        parts.append(f"{_plural(failures, 'failure')} (see failures)")
    return "; ".join(parts)


def finish_result(
    run: JobRun,
    settings: JobSettings,
    *,
    result_id: str,
    created_at: str,
    rows: list[Row],
    gpu: str | None,
    failures: list[Failure],
    status: JobStatus,
    message: str,
    error: Failure | None,
    comparisons: list[Comparison] | None = None,
    correctness: list[Correctness] | None = None,
    diagnosed: JobDiagnosis | None = None,
) -> ProfileResult:
    """The one finishing step: provenance, artifacts and timestamps for any job's result."""
    provenance = provenance_of(run, settings, gpu)
    if diagnosed is not None and diagnosed.notes:
        provenance.notes += diagnosed.notes
    return ProfileResult(
        result_id=result_id,
        status=status,
        message=message,
        created_at=created_at,
        finished_at=iso(utc_now()),
        rows=rows,
        comparisons=comparisons or [],
        correctness=correctness or [],
        failures=failures,
        error=error,
        provenance=provenance,
        artifacts={**run.artifacts, "job_dir": str(run.job_dir)},
        diagnoses=diagnosed.diagnoses if diagnosed is not None else [],
    )


def with_waits(
    result: ProfileResult, waits: Mapping[str, float], *, queued_s: float | None = None
) -> ProfileResult:
    """The result with `waits` (cause -> seconds) added to its provenance's, and their sum.

    Each layer that makes a job wait (the queue and device locks in the server, the standby
    pool in the engine) adds its own causes here, so `wall_seconds` stays the run's time and
    the time before it is accounted for apart. A result without provenance (refused before
    it ran) has nothing to add to."""
    prov = result.provenance
    if prov is None:
        return result
    merged = dict(prov.waits)
    for cause, seconds in waits.items():
        merged[cause] = merged.get(cause, 0.0) + seconds
    merged = {cause: round(s, 3) for cause, s in merged.items() if round(s, 3) > 0}
    update: dict[str, Any] = {"waits": merged, "waited_seconds": round(sum(merged.values()), 3)}
    if queued_s is not None:
        update["queued_seconds"] = round(queued_s, 3)
    return result.model_copy(update={"provenance": prov.model_copy(update=update)})


def diagnose_job(
    run: JobRun,
    settings: JobSettings,
    values: RunValues,
    configs: Sequence[Mapping[str, Any]],
    gpu: str | None,
) -> JobDiagnosis:
    """diagnose.py over a finished job: diagnoses (with ``diagnose``) and the rows' floors."""
    return diagnose_run(
        run.wrapped.report_path,
        diagnose=settings.diagnose,
        groups=list(dict.fromkeys((k.annotation, k.config_id) for k in values.expected_keys)),
        configs=configs,
        floor_events=run.events.floors,
        gpu=gpu,
        check_enabled=settings.check_enabled,
        ignore=settings.kernels.ignore,
    )


# -- what happened, in words: built from the failures recorded ----------------------------

_PHASE_ORDER = ("preflight", "import", "check", "warmup", "profile", "collect")
_PHASE_WORDS = {
    "import": "at import",
    "check": "in the correctness check",
    "warmup": "in warm-up",
    "profile": "in its timed runs",
    "collect": "while its records were read",
}
_CLASS_VERBS = {
    ErrorClass.COMPILE_ERROR: "did not compile",
    ErrorClass.IMPORT_ERROR: "failed to import",
    ErrorClass.RUNTIME_ERROR: "raised",
    ErrorClass.INCORRECT: "gave a wrong output",
    ErrorClass.TIMEOUT: "ran out of time",
    ErrorClass.CRASHED: "crashed its process",
    ErrorClass.OUT_OF_MEMORY: "ran out of memory",
    ErrorClass.PERMISSION_DENIED: "was refused a file",
}
INLINE_SOURCE = "inline_source.py"
"""The name the pipeline and the judge give their copies of a request's inline source."""
_JUDGE_EXITS = (ErrorClass.IMPORT_ERROR, ErrorClass.COMPILE_ERROR, ErrorClass.RUNTIME_ERROR)
"""Job errors that are only the judge's exit code for 'the reference, the input maker or a
callable failed': the failure it recorded says which, where and why."""


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _on_configs(config_ids: Sequence[int | None]) -> str:
    ids = sorted({i for i in config_ids if i is not None})
    if not ids:
        return ""
    return f" on config {ids[0]}" if len(ids) == 1 else f" on configs {_listed(ids)}"


def _listed(ids: Sequence[int]) -> str:
    return ", ".join(map(str, ids))


def _place(f: Failure, inline: bool) -> str:
    """Where the failure points, as a message says it. A line of the request's inline
    source is named so: its file is a copy in the job's (or the judge's private) directory,
    a path the agent never wrote and that differs from job to job."""
    if not f.File or f.File in f.Error:
        return ""
    where = "the inline source" if inline and Path(f.File).name == INLINE_SOURCE else f.File
    return f"; at {where}:{f.Line}" if f.Line else f"; in {where}"


def failed_how(f: Failure, config_ids: Sequence[int | None] = (), *, inline: bool = False) -> str:
    """One failure as a phrase: what went wrong, in which phase, on which configs, and the
    class, message and place, e.g. "raised at import (runtime_error: ...; at v2.py:3)".
    `inline`: the request has inline source (see `_place`)."""
    verb = _CLASS_VERBS.get(f.ErrorClass, "failed")
    where = _PHASE_WORDS.get(f.Phase or "", f"in phase {f.Phase}" if f.Phase else "")
    if f.ErrorClass == ErrorClass.IMPORT_ERROR and f.Phase == "import":
        where = ""
    elif f.ErrorClass == ErrorClass.INCORRECT and f.Phase in ("check", None):
        verb, where = "failed the correctness check", ""
    at = _place(f, inline)
    configs = _on_configs(config_ids or [f.ConfigId])
    return f"{verb}{' ' + where if where else ''}{configs} ({f.ErrorClass}: {_short(f.Error)}{at})"


def _check_failure(c: Correctness) -> Failure:
    return Failure(
        Annotation=c.Annotation,
        ConfigId=c.ConfigId,
        Phase="check",
        ErrorClass=c.ErrorClass or ErrorClass.INCORRECT,
        Error=c.Error or "; ".join(c.Reasons) or "output differs from the reference",
        Hint="see this candidate's correctness entries",
    )


def failures_of(
    annotation: str, failures: Sequence[Failure], correctness: Sequence[Correctness] = ()
) -> list[Failure]:
    """Everything recorded against one callable: its failures, and checks it failed that
    no failure already covers."""
    mine = [f for f in failures if f.Annotation == annotation]
    covered = {f.ConfigId for f in mine if f.Phase == "check"}
    mine += [
        _check_failure(c)
        for c in correctness
        if c.Annotation == annotation and not c.Passed and c.ConfigId not in covered
    ]
    return mine


def _phase_rank(f: Failure) -> int:
    return _PHASE_ORDER.index(f.Phase) if f.Phase in _PHASE_ORDER else len(_PHASE_ORDER)


def first_failure(mine: Sequence[Failure]) -> tuple[Failure, list[int | None]] | None:
    """The earliest failure by phase (import before the check before the runs), with the
    configs on which the same thing happened."""
    if not mine:
        return None
    first = min(mine, key=_phase_rank)
    same = [f.ConfigId for f in mine if (f.Phase, f.ErrorClass) == (first.Phase, first.ErrorClass)]
    return first, same


def reference_failure(
    request: ProfileRequest, failures: Sequence[Failure]
) -> tuple[str, Failure] | None:
    """The trusted side's first failure, in words ("the reference 'ref.py:f' raised at
    import (...)"), and the failure itself; None when the reference and inputs never failed."""
    for role, spec in (("reference", request.reference), ("input maker", request.inputs)):
        got = first_failure(failures_of(spec, failures))
        if got is not None:
            f, configs = got
            how = failed_how(f, configs, inline=request.source is not None)
            return f"the {role} {spec!r} {how}", f
    return None


def _reference_timed(request: ProfileRequest, rows: Sequence[Row]) -> list[int]:
    return sorted(
        {r.ConfigId for r in rows if r.Annotation == request.reference and r.AvgValue is not None}
    )


def _reference_consequence(request: ProfileRequest, rows: Sequence[Row]) -> str:
    """What a reference failure cost: nothing checked or timed, or only some configs."""
    timed = _reference_timed(request, rows)
    if not timed:
        return "nothing was checked or timed"
    lost = [i for i in range(len(request.configs)) if i not in timed]
    if not lost:
        return "its other runs were timed"
    return f"config{'s' if len(lost) > 1 else ''} {_listed(lost)} could not be checked or timed"


def _job_error(
    run: JobRun, failures: Sequence[Failure], ref: tuple[str, Failure] | None
) -> Failure | None:
    """The job's error, replaced by the recorded failure it only stands for: an exit code
    of the judge says a callable failed; the failure says which, where and why."""
    if run.error is None:
        return None
    error = failure_of_error(run.error)
    if error.ErrorClass not in _JUDGE_EXITS:
        return error
    if ref is not None:
        return ref[1]
    if error.ErrorClass == ErrorClass.RUNTIME_ERROR:
        return error
    return next((f for f in failures if f.ErrorClass == error.ErrorClass), error)


def _job_message(
    request: ProfileRequest,
    rows: Sequence[Row],
    summary: str,
    error: Failure | None,
    ref: tuple[str, Failure] | None,
) -> str:
    """The reference's failure first, then the job's own error, then the rows' summary."""
    parts = []
    if ref is not None:
        parts.append(
            f"reference failed: {ref[0]}; {_reference_consequence(request, rows)}. To fix: "
            "fix the reference (or the input maker) at the file and line given, then profile "
            "again"
        )
    if error is not None and (ref is None or error is not ref[1]):
        hint = f" ({error.Hint})" if error.Hint else ""
        parts.append(f"{error.ErrorClass}: {error.Error}{hint}")
    if rows or not parts:
        parts.append(summary)
    return "; ".join(parts)


def _candidate_story(cand: str, result: ProfileResult, inline: bool) -> str:
    """What became of one candidate, without its name."""
    got = first_failure(failures_of(cand, result.failures, result.correctness))
    if got is None:
        return "was not timed and no failure names it (see failures and error)"
    return failed_how(*got, inline=inline)


def no_candidate_passed(request: ProfileRequest, result: ProfileResult) -> ProfileResult:
    """A 'done' result in which no candidate was timed, recorded plainly as 'failed'.

    A candidate passed if it has at least one row with a value; one that failed to import
    or failed its check has none. The message names, per candidate, the phase it failed in
    and why, after the reference's own failure if it had one; the reference's rows stay.
    """
    if result.status != "done" or not request.candidates:
        return result
    timed = {r.Annotation for r in result.rows if r.AvgValue is not None}
    if any(c in timed for c in request.candidates):
        return result
    inline = request.source is not None
    stories = [(c, _candidate_story(c, result, inline)) for c in request.candidates]
    ref = reference_failure(request, result.failures)
    if len(stories) == 1:
        said = "the only candidate, {!r}, {}".format(*stories[0])
    else:
        listed = "; ".join(f"{c!r} {story}" for c, story in stories)
        said = f"none of the {len(stories)} candidates was timed: {listed}"
    if ref is not None:
        said = f"{ref[0]}; {said}"
    ref_timed = _reference_timed(request, result.rows)
    if not ref_timed:
        who_timed = "Nothing was timed"
    elif ref is not None:
        who_timed = f"Only the reference was timed,{_on_configs(list(ref_timed))}"
    else:
        who_timed = "Only the reference was timed"
    message = (
        f"no candidate passed: {said}. {who_timed}. To fix: fix "
        f"{'the reference first, then ' if ref is not None else ''}the candidates (see "
        "failures and correctness) and profile again"
    )
    error = (
        result.error
        or (ref[1] if ref is not None else None)
        or _first_candidate_failure(request, result)
    )
    return result.model_copy(update={"status": "failed", "message": message, "error": error})


def _first_candidate_failure(request: ProfileRequest, result: ProfileResult) -> Failure | None:
    for cand in request.candidates:
        got = first_failure(failures_of(cand, result.failures, result.correctness))
        if got is not None:
            return got[0]
    return None


def assemble_result(
    request: ProfileRequest, run: JobRun, *, result_id: str, created_at: str
) -> ProfileResult:
    settings = JobSettings.of_request(request)
    got = collect_values(run, settings)
    values, failures, gpu = got.values, got.failures, got.gpu
    ctx = row_context(settings, request.configs, gpu)
    rows = aggregate_rows(values, ctx)
    # -- issue 15: the physical floor on every backend, and the diagnosis (diagnose.py) --
    diagnosed = diagnose_job(run, settings, values, request.configs, gpu)
    rows = apply_floor(rows, diagnosed.floors)
    # -- end issue 15 --
    rows = apply_suspects(rows, run.events.suspects, ctx.evidence)
    rows = get_backend(settings.backend).annotate_rows(rows)
    if ctx.evidence == "external":
        rows = flag_reference_kernels(rows, request.reference)
    comparisons = compare_to_reference(values, request.reference, request.candidates, ctx=ctx)
    correctness = correctness_of(request, run.events.checks)
    ref = reference_failure(request, failures)
    error = _job_error(run, failures, ref)
    status: JobStatus
    if run.outcome.cancelled:
        status = "cancelled"
    elif error is not None and not rows:
        status = "failed"
    else:
        status = "done"
    passed = sum(1 for c in correctness if c.Passed)
    summary = _summary(rows, len(correctness), passed, len(failures))
    message = _job_message(request, rows, summary, error, ref)
    result = finish_result(
        run,
        settings,
        result_id=result_id,
        created_at=created_at,
        rows=rows,
        gpu=gpu,
        failures=failures,
        status=status,
        message=message,
        error=error,
        comparisons=comparisons,
        correctness=correctness,
        diagnosed=diagnosed,
    )
    return no_candidate_passed(request, result)
