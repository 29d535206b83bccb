"""A request's files on a Dask worker: the folders they live in travel with the job.

A worker has its own file system and its own current directory, so a request cannot go as
it is: relative paths would resolve against the worker's directory and an absolute path
elsewhere would not exist there. The server resolves the request as a local job would
(`request_workdir`, `named_files`), ships the workdir and each named file's folder outside
it (each up to `MAX_SHIP_BYTES`), and the worker unpacks every folder into a directory of
its own and points the request there. Specs inside the workdir stay as the user wrote them;
only a spec by absolute path (or leading out of the workdir) is rewritten, and the result's
text is mapped back to the user's paths before it leaves the worker. A folder too big to
ship stays at its path, which the workers must then share.
"""

from __future__ import annotations

import base64
import io
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

from nsight_core.request import ProfileRequest, named_files, parse_callable_spec, request_workdir

MAX_SHIP_BYTES = 32 * 2**20
"""Largest folder sent along with a job; larger ones must be shared at the same path."""
MAX_SHIP_FILES = 2000

_SKIP_DIRS = {".git", "__pycache__", ".venv", "venv", "node_modules", ".mypy_cache"}


@dataclass(frozen=True)
class Folder:
    """One folder of the request's files: its path on the server, its zip (None: shared)."""

    path: str
    zip_b64: str | None


def pack_folder(folder: Path) -> str | None:
    """The folder's files as a base64 zip, or None when it is too big to send."""
    buf = io.BytesIO()
    total = files = 0
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for dirpath, dirnames, filenames in os.walk(folder):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
            for name in sorted(filenames):
                path = Path(dirpath) / name
                if not path.is_file() or path.is_symlink():
                    continue
                total += path.stat().st_size
                files += 1
                if total > MAX_SHIP_BYTES or files > MAX_SHIP_FILES:
                    return None
                zf.write(path, path.relative_to(folder).as_posix())
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def request_folders(request: ProfileRequest) -> tuple[ProfileRequest, list[Path]]:
    """The request with its workdir made absolute (the server's directory by default), and
    the folders its files need: the workdir first, then each named file's folder outside it."""
    workdir = request_workdir(request)
    folders = [workdir]
    for f in named_files(request, workdir):
        if not any(_under(f.path.parent, d) for d in folders):
            folders.append(f.path.parent)
    return request.model_copy(update={"workdir": str(workdir)}), folders


def pack_request(request: ProfileRequest) -> tuple[ProfileRequest, list[Folder]]:
    """What the server sends (thread side: reads files)."""
    resolved, folders = request_folders(request)
    return resolved, [Folder(str(d), pack_folder(d)) for d in folders]


@dataclass(frozen=True)
class Unpacked:
    """The request as the worker runs it, and its paths mapped back for the result."""

    request: ProfileRequest
    back: list[tuple[str, str]]
    """(worker path, server path) per unpacked folder."""

    def relabel(self, text: str) -> str:
        """``text`` (a result's JSON) with the worker's folders named as the user's."""
        for here, there in self.back:
            text = text.replace(_json_escaped(here), _json_escaped(there))
        return text


def _json_escaped(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')


def unpack_request(request: ProfileRequest, folders: list[Folder], root: Path) -> Unpacked:
    """Unpack the shipped folders under ``root`` and point the request at them (worker)."""
    moved: dict[Path, Path] = {}
    for i, folder in enumerate(folders):
        if folder.zip_b64 is None:
            continue  # shared: the same path on every worker
        # Fixed-width names: no worker path is a prefix of another, so mapping back is exact.
        target = root / f"files{i:04d}"
        with zipfile.ZipFile(io.BytesIO(base64.b64decode(folder.zip_b64))) as zf:
            zf.extractall(target)
        moved[Path(folder.path)] = target
    workdir = Path(request.workdir or "/")

    def local(spec: str) -> str:
        file, _, name = parse_callable_spec(spec)
        if file is None:
            return spec
        path = Path(os.path.normpath(workdir / file))
        if not Path(file).is_absolute() and _under(path, workdir):
            return spec  # relative inside the workdir: as written
        for there, here in moved.items():
            if _under(path, there):
                return f"{here / path.relative_to(there)}:{name}"
        return spec

    update: dict[str, object] = {
        "workdir": str(moved.get(workdir, workdir)),
        "reference": local(request.reference),
        "inputs": local(request.inputs),
        "candidates": [local(c) for c in request.candidates],
    }
    back = sorted(((str(h), str(t)) for t, h in moved.items()), key=lambda p: -len(p[0]))
    return Unpacked(request.model_copy(update=update), back)
