"""Pickling a `@kernel` function for its worker, Triton kernels included.

The worker runs the user's function in a process of its own, so the function travels as a
cloudpickle, by value where the worker could not import it (``__main__``, local files).
A Triton kernel the function calls is a global of that module, and cloudpickle would copy
the ``JITFunction`` object itself, whose compile caches hold locks that cannot be pickled.
So a kernel travels as what made it: an importable module's kernel by name, any other as
its Python function and ``triton.jit``'s options, compiled again in the worker (the same
way Nsight Python's re-run of the script compiles it again). Autotuned kernels
(``triton.autotune``) are not rebuilt: docs/api.md says how to make them importable.
"""

from __future__ import annotations

import importlib
import io
import linecache
import sys
from collections.abc import Iterable
from typing import Any

import cloudpickle

JIT_OPTIONS = ("do_not_specialize", "do_not_specialize_on_alignment", "debug", "noinline")
"""`triton.jit`'s keyword options that a `JITFunction` keeps under the same names."""


def dumps(obj: Any, by_value: Iterable[str] = ()) -> bytes:
    """``obj`` as cloudpickle writes it, with Triton kernels reduced as the module says;
    ``by_value`` names the modules registered to travel by value."""
    buf = io.BytesIO()
    _Pickler(buf, frozenset(by_value)).dump(obj)
    return buf.getvalue()


class _Pickler(cloudpickle.Pickler):  # type: ignore[misc]
    def __init__(self, file: io.BytesIO, by_value: frozenset[str]) -> None:
        super().__init__(file)
        self.by_value = by_value

    def reducer_override(self, obj: Any) -> Any:
        if _is_triton_kernel(obj):
            fn = obj.fn
            name = getattr(fn, "__module__", None) or ""
            module = sys.modules.get(name)
            importable = name != "__main__" and name not in self.by_value
            if importable and module is not None and getattr(module, fn.__name__, None) is obj:
                return _module_attr, (name, fn.__name__)
            options = {k: getattr(obj, k) for k in JIT_OPTIONS if getattr(obj, k, None)}
            filename = fn.__code__.co_filename
            return _rebuild_triton_kernel, (fn, options, filename, linecache.getlines(filename))
        return super().reducer_override(obj)


def _is_triton_kernel(obj: Any) -> bool:
    cls = type(obj)
    return cls.__name__ == "JITFunction" and cls.__module__.startswith("triton.")


def _module_attr(module: str, name: str) -> Any:
    return getattr(importlib.import_module(module), name)


def _rebuild_triton_kernel(
    fn: Any, options: dict[str, Any], filename: str, lines: list[str]
) -> Any:
    """Triton reads a kernel's source through its code's file name, which cloudpickle does
    not keep: the name comes back, and the file's lines as the caller read them (the worker
    may not be allowed to read the file)."""
    import triton

    if lines:
        linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)
        fn.__code__ = fn.__code__.replace(co_filename=filename)
    return triton.jit(fn, **options)
