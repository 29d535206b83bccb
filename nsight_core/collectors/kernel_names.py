"""Kernel names as rows show them: a CUPTI record's (often mangled) name reduced to the
function-name base that ncu reports, so the same kernel reads the same under both."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
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


__all__ = ["base_name", "kernel_name"]
