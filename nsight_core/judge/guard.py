"""What keeps candidate code out of the judge, and what tells if its own tools were rebound.

The server refuses a request whose reference or input maker shares a module with a
candidate (pipeline.check_trusted_apart). Two ways around that remain inside the judge's
process, and both are closed here:

- the trusted module imports a candidate's module (``import kernels`` where kernels.py holds
  a candidate): `CandidateImportGuard`, first on ``sys.meta_path`` for the judge's life,
  refuses to import any module whose file or name is a candidate's, so that code never
  runs here; the reference then fails to import with a message that says why;
- code the judge does run (the trusted module's, or a library it pulls in) rebinds what the
  judge checks and draws with: `BoundTools` remembers those objects before any user import
  and names each one that is no longer the same, and the job fails instead of giving
  verdicts that the rebinding decided.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import random
import secrets
import sys
from collections.abc import Iterable, Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Any

_OWN_MODULES = (
    "nsight_core.judge.verdict",
    "nsight_core.judge.regimes",
    "nsight_core.judge.core",
    "nsight_core.judge.entry",
    "nsight_core.judge.account",
    "nsight_core.judge.calls",
    "nsight_core.judge.config_run",
    "nsight_core.runtime.compare",
    "nsight_core.runtime.compare_values",
    "nsight_core.runtime.check",
    "nsight_core.runtime.exchange",
    "nsight_core.runtime.slot_bytes",
)
"""The judge's own checking, drawing and exchange code: every function in them is watched."""

_LIBRARY_NAMES: dict[str, tuple[str, ...]] = {
    "random": ("Random", "SystemRandom", "seed", "random", "getrandbits"),
    "secrets": ("randbits", "token_hex", "token_bytes", "SystemRandom"),
    "os": ("urandom",),
    "torch": (
        "manual_seed",
        "seed",
        "randn",
        "rand",
        "randint",
        "randn_like",
        "rand_like",
        "allclose",
        "isclose",
        "equal",
        "isfinite",
        "isnan",
        "abs",
        "Tensor",
    ),
    "torch.cuda": ("manual_seed", "manual_seed_all", "synchronize"),
    "numpy": ("allclose", "isclose", "array_equal", "isfinite", "isnan", "abs"),
    "numpy.random": ("seed", "default_rng", "Generator", "RandomState", "randn", "rand"),
}
"""Library functions the judge's inputs and verdicts go through (seeding, random fills,
comparisons), watched where the library is loaded."""

_TENSOR_METHODS = ("clone", "copy_", "__eq__", "__sub__", "abs", "float", "to", "cpu")
_RANDOM_METHODS = ("random", "getrandbits", "seed", "randrange", "randint")


class CandidateImportGuard(importlib.abc.MetaPathFinder):
    """Refuses, in the judge, any import of a candidate's file or module."""

    def __init__(self, files: Iterable[Path], modules: Iterable[str]) -> None:
        self.files = {f.resolve() for f in files}
        self.modules = set(modules)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if any(fullname == m or fullname.startswith(m + ".") for m in self.modules):
            raise ImportError(self._refusal(fullname), name=fullname)
        found = importlib.machinery.PathFinder.find_spec(fullname, path)
        origin = found.origin if found is not None else None
        if origin and Path(origin).resolve() in self.files:
            raise ImportError(self._refusal(fullname), name=fullname)
        return None  # not a candidate's: the usual finders import it

    @staticmethod
    def _refusal(name: str) -> str:
        return (
            f"the reference's side imports {name!r}, which holds a candidate; the judge never "
            "runs candidate code: keep the reference and the input maker in modules that do "
            "not import the candidates (a candidate may import the reference's module)"
        )

    def install(self) -> None:
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)


class BoundTools:
    """The objects the judge checks and draws with, as bound before any user import."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._bound = dict(self._current())

    def _current(self) -> Iterable[tuple[str, Any]]:
        for name in _OWN_MODULES:
            module = sys.modules.get(name)
            if module is None:
                continue
            for attr, value in list(vars(module).items()):
                if callable(value) and not attr.startswith("__"):
                    yield f"{name}.{attr}", value
        for name, attrs in _LIBRARY_NAMES.items():
            module = sys.modules.get(name)
            if module is None:
                continue
            for attr in attrs:
                if hasattr(module, attr):
                    yield f"{name}.{attr}", getattr(module, attr)
        tensor = getattr(sys.modules.get("torch"), "Tensor", None)
        for attr in _TENSOR_METHODS if tensor is not None else ():
            yield f"torch.Tensor.{attr}", tensor.__dict__.get(attr, getattr(tensor, attr, None))
        for attr in _RANDOM_METHODS:
            yield f"random.Random.{attr}", random.Random.__dict__.get(attr)
        yield "secrets module", secrets
        yield "the judge's generator type", type(self._rng)

    def changed(self) -> list[str]:
        """What is no longer the object it was, and what the judge's own generator gained."""
        now = dict(self._current())
        out = [k for k, v in self._bound.items() if k in now and now[k] is not v]
        out += [k for k in now if k not in self._bound and k.startswith("nsight_core.")]
        own = [a for a in vars(self._rng) if a != "gauss_next"]
        out += [f"the judge's generator's attribute {a!r}" for a in own]
        return out
