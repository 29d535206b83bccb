"""Output comparison: does a candidate's output equal the reference's, within tolerance?

Imported in the worker. torch, numpy and cupy are never imported here at module import:
an array is recognised by looking the framework up in ``sys.modules`` (an object of a
framework cannot exist before the framework was imported), and numpy is imported inside
the functions that do arithmetic.

`compare_outputs` checks, in this order, stopping at the first structural difference:
container structure (dict keys, sequence lengths), leaf type (exact type, so a tensor
subclass standing in for a lazy result fails), shape, dtype, device, then values with
dtype-aware tolerances (`DEFAULT_TOLERANCES`). NaN must sit where the reference has NaN,
and +-Inf where it has the same infinity. Values are compared in float64, torch
tensors on their own device and other arrays on the host, in chunks, so a large tensor
costs a bounded amount of memory. `same_result` is the same walk with zero tolerance
(determinism, and `check.mutated`'s before/after comparison of inputs).
docs/correctness.md explains each rule.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from nsight_core.runtime.compare_values import LeafStats, torch_leaf_stats

DiffKind = Literal["type", "structure", "shape", "dtype", "device", "layout", "values"]

DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    # dtype: (atol, rtol). Closeness is |actual - expected| <= atol + rtol * |expected|.
    # float64, float16, bfloat16 and the complex types follow torch.testing.assert_close.
    "float64": (1e-7, 1e-7),
    "complex128": (1e-7, 1e-7),
    # torch.testing uses rtol 1.3e-6 for float32; candidates legitimately reorder long
    # reductions, so we allow 1e-5, still far below TF32 (eps ~1e-3) or a float16 downgrade.
    "float32": (1e-5, 1e-5),
    "complex64": (1e-5, 1e-5),
    "float16": (1e-5, 1e-3),
    "complex32": (1e-5, 1e-3),
    "bfloat16": (1e-5, 1.6e-2),
    # float8 (no torch.testing default): rtol one unit in the last place (2**-3, 2**-2),
    # atol the smallest subnormal.
    "float8_e4m3": (2.0**-9, 2.0**-3),
    "float8_e5m2": (2.0**-16, 2.0**-2),
    # numpy's long double is compared in float64.
    "float128": (1e-7, 1e-7),
    "longdouble": (1e-7, 1e-7),
}
"""Default (atol, rtol) by dtype name; integers and bool compare exactly."""

_CHUNK = 1 << 20
"""Elements per host chunk: a few float64 temporaries of 8 MiB each."""


@dataclass(frozen=True)
class OutputDiff:
    """How an actual output differs from an expected one (``passed`` when it does not)."""

    passed: bool
    max_abs_error: float | None = None
    """Largest |actual - expected| over finite pairs; None when no number was compared."""
    max_rel_error: float | None = None
    """Largest |actual - expected| / |expected| over finite pairs with expected != 0."""
    mismatch_count: int | None = None
    """Elements outside tolerance (or NaN/Inf misplaced); None after a structural failure."""
    first_bad_index: list[int] | None = None
    """Multi-index of the first bad element inside the leaf at ``path``."""
    reason: str = ""
    """What differs, for the agent; empty when passed."""
    path: str | None = None
    """The leaf that failed first: ``output``, ``output[1]['y']``..."""
    kind: DiffKind | None = None
    """Which check failed first."""


def default_tolerance(dtype_name: str) -> tuple[float, float] | None:
    """(atol, rtol) for a dtype name ('float32', 'torch.bfloat16'); (0, 0) for integers and
    bool; None for an unknown floating type (then pass tolerances explicitly)."""
    name = dtype_name.removeprefix("torch.")
    if name in DEFAULT_TOLERANCES:
        return DEFAULT_TOLERANCES[name]
    for prefix in ("float8_e4m3", "float8_e5m2"):
        if name.startswith(prefix):
            return DEFAULT_TOLERANCES[prefix]
    if name == "bool" or name.startswith(("int", "uint")):
        return 0.0, 0.0
    return None


# -- recognising arrays ---------------------------------------------------------------


def array_kind(x: object) -> Literal["torch", "numpy", "cupy"] | None:
    """Which framework's array ``x`` is, without importing any framework; None if none."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return "torch"
    np = sys.modules.get("numpy")
    if np is not None and isinstance(x, np.ndarray):
        return "numpy"
    cp = sys.modules.get("cupy")
    if cp is not None and isinstance(x, cp.ndarray):
        return "cupy"
    return None


def _is_number(x: object) -> bool:
    if isinstance(x, bool | int | float | complex):
        return True
    np = sys.modules.get("numpy")
    return np is not None and isinstance(x, np.generic) and x.dtype.kind in "biufc"


def _type_name(x: object) -> str:
    t = type(x)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


@dataclass(frozen=True)
class _ArrayInfo:
    shape: tuple[int, ...]
    dtype: str
    device: str
    layout: str


def _info(kind: str, x: Any) -> _ArrayInfo:
    if kind == "torch":
        return _ArrayInfo(
            tuple(x.shape), str(x.dtype).removeprefix("torch."), str(x.device), str(x.layout)
        )
    if kind == "cupy":
        return _ArrayInfo(tuple(x.shape), str(x.dtype), f"cuda:{x.device.id}", "strided")
    return _ArrayInfo(tuple(x.shape), str(x.dtype), "cpu", "strided")


def _host_chunks(kind: str, x: Any) -> Iterator[Any]:
    """The flattened values (C order) as numpy arrays of at most `_CHUNK` elements."""
    if kind == "torch":
        torch = sys.modules["torch"]
        flat = x.detach()
        if flat.layout != torch.strided:
            flat = flat.to_dense()
        flat = flat.resolve_conj().resolve_neg().reshape(-1)
        dtype = flat.dtype
        wider = None
        if dtype.is_complex and dtype != torch.complex64 and dtype != torch.complex128:
            wider = torch.complex64
        elif dtype.is_floating_point and dtype not in (torch.float16, torch.float32, torch.float64):
            wider = torch.float32  # bfloat16, float8: exact in float32, unknown to numpy
        for i in range(0, flat.numel(), _CHUNK):
            part = flat[i : i + _CHUNK]
            yield (part.to(wider) if wider is not None else part).cpu().numpy()
    elif kind == "cupy":
        flat = x.reshape(-1)
        for i in range(0, flat.size, _CHUNK):
            yield flat[i : i + _CHUNK].get()
    else:
        flat = x.reshape(-1)
        for i in range(0, flat.size, _CHUNK):
            yield flat[i : i + _CHUNK]


# -- comparing values ------------------------------------------------------------------


@dataclass
class _Acc:
    """Value comparisons over all leaves of one output."""

    compared: bool = False
    max_abs: float = 0.0
    max_rel: float = 0.0
    mismatches: int = 0
    failed_leaves: int = 0
    first: OutputDiff | None = None

    def add(
        self, stats: LeafStats, path: str, shape: tuple[int, ...], atol: float, rtol: float
    ) -> None:
        self.compared = True
        self.max_abs = max(self.max_abs, stats.max_abs)
        self.max_rel = max(self.max_rel, stats.max_rel)
        self.mismatches += stats.mismatches
        if stats.first_flat is None:
            return
        self.failed_leaves += 1
        if self.first is not None:
            return
        index = _unravel(stats.first_flat, shape)
        reason = (
            f"{path}: {stats.mismatches} of {stats.numel} elements differ beyond "
            f"atol={atol:g}, rtol={rtol:g} (max abs error {stats.max_abs:.3g}, "
            f"max rel error {stats.max_rel:.3g}); first at index {index}: "
            f"expected {stats.first_expected!r}, got {stats.first_actual!r}"
        )
        if stats.nonfinite_mismatches:
            reason += f"; {stats.nonfinite_mismatches} at NaN/Inf positions that do not match"
        self.first = OutputDiff(
            False, first_bad_index=index, reason=reason, path=path, kind="values"
        )

    def result(self) -> OutputDiff:
        abs_err = self.max_abs if self.compared else None
        rel_err = self.max_rel if self.compared else None
        if self.first is None:
            return OutputDiff(True, abs_err, rel_err, self.mismatches)
        reason = self.first.reason
        if self.failed_leaves > 1:
            reason += f"; {self.failed_leaves - 1} more output(s) differ too"
        return OutputDiff(
            False,
            abs_err,
            rel_err,
            self.mismatches,
            self.first.first_bad_index,
            reason,
            self.first.path,
            "values",
        )


def _unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    index = []
    for dim in reversed(shape):
        flat, r = divmod(flat, dim)
        index.append(r)
    return index[::-1]


def _fail(kind: DiffKind, path: str, what: str) -> OutputDiff:
    return OutputDiff(False, reason=f"{path}: {what}", path=path, kind=kind)


def _tolerances(
    dtype: str, atol: float | None, rtol: float | None, path: str
) -> tuple[float, float] | OutputDiff:
    default = default_tolerance(dtype)
    if default is None and (atol is None or rtol is None):
        return _fail(
            "dtype", path, f"no default tolerance for dtype {dtype}; pass check.atol and check.rtol"
        )
    d_atol, d_rtol = default or (0.0, 0.0)
    return (d_atol if atol is None else atol), (d_rtol if rtol is None else rtol)


def _compare_arrays(
    kind: str, e: Any, a: Any, path: str, atol: float | None, rtol: float | None, acc: _Acc
) -> OutputDiff | None:
    ei, ai = _info(kind, e), _info(kind, a)
    if ei.shape != ai.shape:
        return _fail(
            "shape", path, f"shape differs: expected {list(ei.shape)}, got {list(ai.shape)}"
        )
    if ei.dtype != ai.dtype:
        return _fail("dtype", path, f"dtype differs: expected {ei.dtype}, got {ai.dtype}")
    if ei.device != ai.device:
        return _fail("device", path, f"device differs: expected {ei.device}, got {ai.device}")
    if ei.layout != ai.layout:
        return _fail("layout", path, f"layout differs: expected {ei.layout}, got {ai.layout}")
    tol = _tolerances(ei.dtype, atol, rtol, path)
    if isinstance(tol, OutputDiff):
        return tol
    if kind == "torch" and not e.dtype.is_complex:
        stats = torch_leaf_stats(e, a, *tol)
    else:
        stats = LeafStats()
        offset = 0
        for ec, ac in zip(_host_chunks(kind, e), _host_chunks(kind, a), strict=True):
            stats.feed(ec, ac, offset, *tol)
            offset += ec.size
    acc.add(stats, path, ei.shape, *tol)
    return None


def _compare_numbers(
    e: Any, a: Any, path: str, atol: float | None, rtol: float | None, acc: _Acc
) -> OutputDiff | None:
    import numpy as np

    ea, aa = np.asarray(e), np.asarray(a)
    families = {"b": "bool", "i": "integer", "u": "integer", "f": "float", "c": "complex"}
    if ea.dtype.kind not in families or aa.dtype.kind not in families:
        # Python ints beyond 64 bits: numpy holds them as objects; compare exactly.
        return None if e == a else _fail("values", path, f"expected {e!r}, got {a!r}")
    ef, af = families[ea.dtype.kind], families[aa.dtype.kind]
    if ef != af:
        return _fail(
            "dtype", path, f"expected a {ef} ({_type_name(e)}), got a {af} ({_type_name(a)})"
        )
    tol = _tolerances(str(ea.dtype), atol, rtol, path)
    if isinstance(tol, OutputDiff):
        return tol
    stats = LeafStats()
    stats.feed(ea.reshape(-1), aa.reshape(-1), 0, *tol)
    acc.add(stats, path, (), *tol)
    return None


@dataclass
class _Walker:
    """Walks expected and actual together; stops at the first structural difference."""

    atol: float | None
    rtol: float | None
    acc: _Acc

    def walk(self, e: Any, a: Any, path: str) -> OutputDiff | None:
        ek, ak = array_kind(e), array_kind(a)
        if ek is not None or ak is not None:
            if ek != ak or type(e) is not type(a):
                return _fail("type", path, f"expected {_type_name(e)}, got {_type_name(a)}")
            assert ek is not None
            return _compare_arrays(ek, e, a, path, self.atol, self.rtol, self.acc)
        if isinstance(e, Mapping):
            return self._mapping(e, a, path)
        if isinstance(e, list | tuple):
            return self._sequence(e, a, path)
        if _is_number(e):
            if not _is_number(a):
                return _fail("type", path, f"expected a number, got {_type_name(a)}")
            return _compare_numbers(e, a, path, self.atol, self.rtol, self.acc)
        return _compare_objects(e, a, path)

    def _mapping(self, e: Mapping[Any, Any], a: Any, path: str) -> OutputDiff | None:
        if not isinstance(a, Mapping):
            return _fail("type", path, f"expected a mapping, got {_type_name(a)}")
        missing = [k for k in e if k not in a]
        extra = [k for k in a if k not in e]
        if missing or extra:
            return _fail("structure", path, f"keys differ: missing {missing}, unexpected {extra}")
        for k in e:
            found = self.walk(e[k], a[k], f"{path}[{k!r}]")
            if found is not None:
                return found
        return None

    def _sequence(self, e: list[Any] | tuple[Any, ...], a: Any, path: str) -> OutputDiff | None:
        if not isinstance(a, list | tuple):
            return _fail("type", path, f"expected a sequence, got {_type_name(a)}")
        if len(e) != len(a):
            return _fail("structure", path, f"length differs: expected {len(e)}, got {len(a)}")
        for i, (ev, av) in enumerate(zip(e, a, strict=True)):
            found = self.walk(ev, av, f"{path}[{i}]")
            if found is not None:
                return found
        return None


def _compare_objects(e: Any, a: Any, path: str) -> OutputDiff | None:
    """Leaves that are neither arrays nor numbers (None, strings...): same type and ==."""
    if type(e) is not type(a):
        return _fail("type", path, f"expected {_type_name(e)}, got {_type_name(a)}")
    try:
        equal = bool(e == a)
    except Exception:  # an object whose == does not give a truth value
        equal = False
    return None if equal else _fail("values", path, f"expected {e!r:.200}, got {a!r:.200}")


def _diff(
    expected: Any, actual: Any, root: str, atol: float | None, rtol: float | None
) -> OutputDiff:
    acc = _Acc()
    structural = _Walker(atol, rtol, acc).walk(expected, actual, root)
    return structural if structural is not None else acc.result()


def compare_outputs(
    expected: Any, actual: Any, *, atol: float | None, rtol: float | None
) -> OutputDiff:
    """Compare ``actual`` with ``expected``; a tolerance left None takes the dtype default."""
    return _diff(expected, actual, "output", atol, rtol)


def same_result(a: Any, b: Any, *, path: str = "output") -> OutputDiff:
    """Exact equality of two results (NaN equal to NaN in the same place): the determinism check.

    ``path`` names the root in the answer (``output``, or an input's name for mutation).
    """
    return _diff(a, b, path, 0.0, 0.0)
