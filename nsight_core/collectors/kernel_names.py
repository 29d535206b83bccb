"""Kernel names as rows show them: a CUPTI record's (often mangled) name reduced to the
function-name base that ncu reports, so the same kernel reads the same under both; and a
launch's grid and block, written alike from ncu's launch attributes and CUPTI's records."""

from __future__ import annotations

import ctypes
import zlib
from collections.abc import Callable, Sequence
from functools import lru_cache


def _matching_close(text: str, close_at: int, open_ch: str, close_ch: str) -> int:
    """Index of the bracket that opens the one closing at ``close_at``; -1 if unbalanced."""
    depth = 0
    for i in range(close_at, -1, -1):
        if text[i] == close_ch:
            depth += 1
        elif text[i] == open_ch:
            depth -= 1
            if depth == 0:
                return i
    return -1


def base_name(demangled: str) -> str:
    """ncu's function-name base of a demangled signature: no return type, scope, template
    arguments or parameters ('void at::native::(anonymous namespace)::f<4, float>(float*)'
    -> 'f'). A plain C name (Triton's) comes back unchanged."""
    s = demangled.strip()
    for suffix in (" const", " volatile", " &&", " &"):
        s = s.removesuffix(suffix)
    if s.endswith(")"):
        i = _matching_close(s, len(s) - 1, "(", ")")
        if i > 0:
            s = s[:i].rstrip()
    if s.endswith(">"):
        i = _matching_close(s, len(s) - 1, "<", ">")
        if i > 0:
            s = s[:i].rstrip()
    depth, cut = 0, 0
    for i, ch in enumerate(s):
        if ch in "(<":
            depth += 1
        elif ch in ")>":
            depth -= 1
        elif depth == 0 and (ch == " " or (ch == ":" and s[i - 1 : i] == ":")):
            cut = i + 1
    return s[cut:] or demangled


@lru_cache(maxsize=1)
def _cxa_demangle() -> Callable[[str], str | None]:
    """libstdc++'s demangler through ctypes (already loaded by torch in the contestant)."""
    try:
        lib = ctypes.CDLL("libstdc++.so.6")
        libc = ctypes.CDLL(None)
    except OSError:
        return lambda _name: None
    fn = lib.__cxa_demangle
    fn.restype = ctypes.c_void_p
    fn.argtypes = [
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.POINTER(ctypes.c_int),
    ]
    free = libc.free
    free.argtypes = [ctypes.c_void_p]
    free.restype = None

    def demangle(name: str) -> str | None:
        status = ctypes.c_int(-1)
        ptr = fn(name.encode(), None, None, ctypes.byref(status))
        if not ptr:
            return None
        try:
            return ctypes.string_at(ptr).decode(errors="replace") if status.value == 0 else None
        finally:
            free(ptr)

    return demangle


@lru_cache(maxsize=4096)
def kernel_name(raw: str) -> str:
    """The name rows show for a CUPTI kernel name: demangled, then reduced to ncu's base."""
    demangled = _cxa_demangle()(raw) if raw.startswith("_Z") else None
    return base_name(demangled or raw)


def _dims(dims: Sequence[int]) -> str:
    parts = [int(d) for d in dims]
    while len(parts) > 1 and parts[-1] == 1:
        parts.pop()
    return "x".join(str(d) for d in parts)


def launch_label(grid: Sequence[int], block: Sequence[int], function: str = "") -> str:
    """A launch as CUDA writes it, trailing 1s left out: ``<<<2x66, 384>>>`` for grid
    (2, 66, 1) and block (384, 1, 1), then ``#`` and a digest of ``function``, the kernel's
    full name (mangled or demangled), so launches of two instantiations of one template
    (torch's ``vectorized_elementwise_kernel`` for a multiply and for an add) differ too.
    What tells launches apart in a call's kernel set (collectors/kernel_sets.py); without
    known dimensions (a profiler that did not say, a record without them) only the digest."""
    dims = ""
    if len(grid) == 3 and len(block) == 3 and min(*grid, *block) > 0:
        dims = f"<<<{_dims(grid)}, {_dims(block)}>>>"
    digest = f"#{zlib.crc32(function.encode()):08x}" if function else ""
    return f"{dims} {digest}".strip()


def launch_dims(launch: str) -> str:
    """The part of a `launch_label` a reader needs: grid and block, without the digest."""
    return launch.partition("#")[0].rstrip()


__all__ = ["base_name", "kernel_name", "launch_dims", "launch_label"]
