"""A recorded failure: where it points in the user's code, and how it is told in words.

Messages are built from the failures recorded, never from a fixed sentence: each names the
phase a callable failed in (import, the correctness check, warm-up, its timed runs), its
class and the user's file and line (the harness's and libraries' frames are skipped).
The result's own message (`assemble`) and the `@kernel` API tell failures with these.
"""

from __future__ import annotations

import re
import sysconfig
from collections.abc import Sequence
from pathlib import Path

from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.protocol import FailureEvent
from nsight_core.request import ProfileRequest
from nsight_core.results import Correctness, Failure

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
        Hint=ev.hint,
        Traceback=ev.traceback,
        File=file,
        Line=line,
    )


def failure_of_error(err: NsightCoreError, phase: str | None = None) -> Failure:
    return Failure(ErrorClass=err.error_class, Error=err.message, Hint=err.hint, Phase=phase)


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
INLINE_NAMES = {
    "inline_source.py": "the inline source",
    "inline_reference.py": "the inline reference_source",
}
"""The names the pipeline and the judge give their copies of a request's inline sources,
and how a message names each."""


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def on_configs(config_ids: Sequence[int | None]) -> str:
    ids = sorted({i for i in config_ids if i is not None})
    if not ids:
        return ""
    return f" on config {ids[0]}" if len(ids) == 1 else f" on configs {listed_ids(ids)}"


def listed_ids(ids: Sequence[int]) -> str:
    return ", ".join(map(str, ids))


def _place(f: Failure, inline: bool) -> str:
    """Where the failure points, as a message says it. A line of the request's inline
    source is named so: its file is a copy in the job's (or the judge's private) directory,
    a path the agent never wrote and that differs from job to job."""
    if not f.File or f.File in f.Error:
        return ""
    where = INLINE_NAMES.get(Path(f.File).name, f.File) if inline else f.File
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
    configs = on_configs(config_ids or [f.ConfigId])
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
            inline = request.source is not None or request.reference_source is not None
            how = failed_how(f, configs, inline=inline)
            return f"the {role} {spec!r} {how}", f
    return None
