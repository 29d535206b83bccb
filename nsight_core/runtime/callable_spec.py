"""How a request names a callable: ``"file.py:name"``, ``"package.module:name"``, or a bare
``"name"`` inside inline source; and the input maker a reference implies.

Here, beside the loader (runtime/loader.py) that imports what a spec names in the judge and
the contestant, rather than in the request models: `nsight_core.request` re-exports both
names for the server's side.
"""

from __future__ import annotations

import re


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
