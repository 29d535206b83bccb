"""How a request names a callable: ``"file.py:name"``, ``"package.module:name"``, or a bare
``"name"`` inside inline source; and the input maker a reference implies.

Here, beside the loader (runtime/loader.py) that imports what a spec names in the judge and
the contestant, rather than in the request models: `nsight_core.request` re-exports both
names for the server's side. A job's plan resolves each spec once (`resolve_spec`: its
file made absolute against the workdir) and hands the judge and the contestant the
`ResolvedSpec`s, so neither derives a spec's file again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


def parse_callable_spec(spec: str) -> tuple[str | None, str | None, str]:
    """Split a callable spec into (file, module, attribute path); raises ValueError if malformed."""
    spec = spec.strip()
    if ":" in spec:
        where, _, name = spec.rpartition(":")
        if not name or not re.fullmatch(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*", name):
            raise ValueError(
                f"{spec!r}: the part after ':' must be a Python name; write e.g. 'ref.py:softmax'"
            )
        if where.endswith(".py"):
            return where, None, name
        if re.fullmatch(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*", where):
            return None, where, name
        raise ValueError(
            f"{spec!r}: before ':' must be a file ending in .py or a dotted module name; "
            "write e.g. 'kernels/v2.py:softmax' or 'mypkg.kernels:softmax'"
        )
    if re.fullmatch(r"[A-Za-z_]\w*", spec):
        return None, None, spec
    raise ValueError(
        f"{spec!r} is not a callable spec; use 'file.py:name', 'package.module:name', "
        "or a bare 'name' defined in `source`"
    )


def default_inputs(reference: str) -> str:
    """The input maker beside ``reference`` in its file, module or inline source, by the
    names peer formats use: ``generate_input`` for a GPU MODE task's ``ref_kernel``,
    ``get_inputs`` (KernelBench) otherwise. Raises ValueError for a malformed spec."""
    file, module, attr = parse_callable_spec(reference)
    name = "generate_input" if attr.rpartition(".")[2] == "ref_kernel" else "get_inputs"
    where = file or module
    return f"{where}:{name}" if where else name


@dataclass(frozen=True)
class ResolvedSpec:
    """A spec as its job's plan resolved it: exactly one of ``path`` (the file, absolute),
    ``module`` (a dotted module name), or neither (a bare name in the inline source)."""

    spec: str
    """As the request wrote it: what messages name."""
    path: str | None
    module: str | None
    attr: str
    """The attribute path in the module (``Model.forward``)."""

    @property
    def file(self) -> str | None:
        """The file as the spec wrote it (relative to the workdir, or absolute)."""
        return self.spec.strip().rpartition(":")[0] if self.path is not None else None


def resolve_spec(spec: str, workdir: Path) -> ResolvedSpec:
    """``spec`` resolved against ``workdir``; raises ValueError if malformed."""
    file, module, attr = parse_callable_spec(spec)
    path = str((workdir / file).resolve()) if file is not None else None
    return ResolvedSpec(spec, path, module, attr)
