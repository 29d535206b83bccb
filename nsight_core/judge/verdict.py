"""The judge's verdict on one call's output: right values, right types, and better than trivial.

`compare_outputs` decides closeness with the request's (or the dtype's) tolerances. That
alone lets cheap answers through when the tolerance is loose next to the output's
magnitude: all-zeros passed ``allclose(atol=1e-2)`` on several KernelBench problems whose
outputs are small. So, per config, the judge also scores trivial answers against the
expected output: zeros, the expected output's mean as a constant, and each input of the
output's shape (an identity copy). A trivial answer that passes shows the tolerance cannot
tell work from no work on this output; a candidate must then be at least `TRIVIAL_MARGIN`
times closer than the best such trivial answer. Trivial answers that are exact (a zero or
constant output) cannot discriminate and are skipped.

NaN or Inf where the reference is finite is a mismatch (compare_outputs counts it).

Peer formats (runtime/formats.py): a KernelBench problem's outputs are compared with
KernelBench's tolerances where the request sets none; a GPU MODE task's own
``check_implementation`` decides instead of `compare_outputs`, called on a copy of the
call's data and the judge's own copy of the output (max errors are still recorded).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from nsight_core.runtime import formats
from nsight_core.runtime.check import clone_args, compare_outputs
from nsight_core.runtime.compare import OutputDiff, array_kind
from nsight_core.runtime.exchange import type_name
from nsight_core.runtime.leaves import array_leaves
from nsight_core.runtime.messages import ArrayNode, DictNode, Node, OpaqueNode, SeqNode, ValueNode

TRIVIAL_MARGIN = 10.0
"""How much closer than a passing trivial answer a candidate must be."""


@dataclass
class Tally:
    """One candidate's checks on one config, over every call the judge compared."""

    calls: int = 0
    passed: bool = True
    max_abs: float = 0.0
    max_rel: float = 0.0
    mismatches: int = 0
    first_bad_index: list[int] | None = None
    reasons: list[str] = field(default_factory=list)

    def fail(self, reason: str) -> None:
        self.passed = False
        if reason not in self.reasons and len(self.reasons) < 8:
            self.reasons.append(reason)

    def add_errors(self, diff: OutputDiff) -> None:
        """Keep the largest errors over every call, a failing call's included: they say how
        far off the candidate is, whatever the verdict."""
        if diff.max_abs_error is not None:
            self.max_abs = max(self.max_abs, float(diff.max_abs_error))
        if diff.max_rel_error is not None:
            self.max_rel = max(self.max_rel, float(diff.max_rel_error))

    def add_mismatches(self, diff: OutputDiff, reason: str) -> bool:
        """Whether ``diff`` passed; where not, the call fails for ``reason`` and the first
        bad index seen is kept to point the candidate's author at it."""
        self.mismatches += int(diff.mismatch_count or 0)
        if diff.passed:
            return True
        self.fail(reason)
        if self.first_bad_index is None and diff.first_bad_index is not None:
            self.first_bad_index = list(diff.first_bad_index)
        return False


@dataclass(frozen=True)
class TrivialBound:
    """The closest trivial answer that passes the tolerance on this config, if any."""

    name: str
    max_abs_error: float

    @property
    def required(self) -> float:
        return self.max_abs_error / TRIVIAL_MARGIN


def _float_arrays(x: Any) -> bool:
    leaves = [leaf for _, leaf, _ in array_leaves(x)]
    return bool(leaves) and all(
        getattr(leaf.dtype, "is_floating_point", False)
        or str(leaf.dtype).startswith(("float", "bfloat"))
        for leaf in leaves
    )


def _map_leaves(x: Any, fn: Any) -> Any:
    if array_kind(x) is not None:
        return fn(x)
    if isinstance(x, dict):
        return {k: _map_leaves(v, fn) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(_map_leaves(v, fn) for v in x)
    if isinstance(x, list):
        return [_map_leaves(v, fn) for v in x]
    return x


def _zeros(a: Any) -> Any:
    return a * 0


def _mean_constant(a: Any) -> Any:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.Tensor):
        return torch.full_like(a, float(a.double().mean()) if a.numel() else 0.0)
    return a * 0 + (a.mean() if a.size else 0)


def trivial_bound(
    expected: Any,
    inputs: tuple[tuple[Any, ...], dict[str, Any]],
    atol: float | None,
    rtol: float | None,
) -> TrivialBound | None:
    """The closest trivial answer that passes the tolerances on ``expected``; None if none does."""
    if not _float_arrays(expected):
        return None
    atol, rtol = tolerances(expected, atol, rtol)
    candidates: list[tuple[str, Any]] = [
        ("all zeros", _map_leaves(expected, _zeros)),
        ("a constant (the mean)", _map_leaves(expected, _mean_constant)),
    ]
    if array_kind(expected) is not None:
        args, kwargs = inputs
        named = [(f"args[{i}]", v) for i, v in enumerate(args)] + list(kwargs.items())
        for name, value in named:
            if (
                array_kind(value) is not None
                and type(value) is type(expected)
                and tuple(value.shape) == tuple(expected.shape)
                and value.dtype == expected.dtype
                and str(getattr(value, "device", "cpu")) == str(getattr(expected, "device", "cpu"))
            ):
                candidates.append((f"the input {name} itself", value))
    best: TrivialBound | None = None
    for name, answer in candidates:
        diff = compare_outputs(expected, answer, atol=atol, rtol=rtol)
        err = diff.max_abs_error
        if not diff.passed or err is None or err == 0.0:
            continue  # fails anyway, or exact (a constant output): cannot discriminate
        if best is None or err < best.max_abs_error:
            best = TrivialBound(name, err)
    return best


def type_mismatch(expected: Any, node: Node, path: str = "output") -> str | None:
    """The first place where the output's structure or exact types differ from expected."""
    if array_kind(expected) is not None:
        return _array_mismatch(expected, node, path)
    if isinstance(expected, dict):
        return _dict_mismatch(expected, node, path)
    if isinstance(expected, tuple | list):
        return _seq_mismatch(expected, node, path)
    if isinstance(node, OpaqueNode):
        return f"{path} is a {node.type_name}, which cannot be compared"
    if isinstance(node, ValueNode) and node.type_name != type_name(expected):
        return f"{path} is a {node.type_name}, the reference returns {type_name(expected)}"
    return None


def _array_mismatch(expected: Any, node: Node, path: str) -> str | None:
    if not isinstance(node, ArrayNode):
        return f"{path} is {_node_type(node)}, the reference returns {type_name(expected)}"
    if node.type_name != type_name(expected):
        return f"{path} is a {node.type_name}, the reference returns {type_name(expected)}"
    cuda = array_kind(expected) == "cupy" or bool(getattr(expected, "is_cuda", False))
    device = "cuda" if cuda else "cpu"
    if node.device != device:
        return f"{path} is on {node.device}, the reference's output is on {device}"
    return None


def _dict_mismatch(expected: dict[Any, Any], node: Node, path: str) -> str | None:
    if not isinstance(node, DictNode) or sorted(node.keys) != sorted(map(str, expected)):
        return f"{path} is {_node_type(node)}, the reference returns a dict of {sorted(expected)}"
    for k, v in zip(node.keys, node.items, strict=True):
        found = type_mismatch(expected[k], v, f"{path}[{k!r}]")
        if found:
            return found
    return None


def _seq_mismatch(expected: tuple[Any, ...] | list[Any], node: Node, path: str) -> str | None:
    kind = "tuple" if isinstance(expected, tuple) else "list"
    if not isinstance(node, SeqNode) or node.kind != kind or len(node.items) != len(expected):
        return f"{path} is {_node_type(node)}, the reference returns a {kind} of {len(expected)}"
    for i, (e, n) in enumerate(zip(expected, node.items, strict=True)):
        found = type_mismatch(e, n, f"{path}[{i}]")
        if found:
            return found
    return None


def _node_type(node: Node) -> str:
    if isinstance(node, SeqNode):
        return f"a {node.kind} of {len(node.items)}"
    if isinstance(node, ArrayNode | OpaqueNode | ValueNode):
        return f"a {node.type_name}"
    return f"a {node.kind}"


def judge_output(
    tally: Tally,
    expected: Any,
    actual: Any,
    *,
    atol: float | None,
    rtol: float | None,
    bound: TrivialBound | None,
    inputs: Any = None,
) -> None:
    """Fold one call's comparison into ``tally``; ``inputs``: the call's own arguments (a
    GPU MODE task's check needs the data of this call, which a probe may have repeated)."""
    tally.calls += 1
    atol, rtol = tolerances(expected, atol, rtol)
    diff = compare_outputs(expected, actual, atol=atol, rtol=rtol)
    tally.add_errors(diff)
    task = formats.task_check()
    if task is not None:
        _judge_by_task(tally, task, actual, inputs)
        return
    if not tally.add_mismatches(diff, f"output mismatch: {diff.reason}"):
        return
    err = diff.max_abs_error
    if bound is not None and err is not None and err > bound.required:
        tally.fail(
            f"output mismatch: no better than a trivial answer: {bound.name} is within "
            f"the tolerance here (max abs error {bound.max_abs_error:.3g}); the output "
            f"must be {TRIVIAL_MARGIN:g}x closer than that, its max abs error is "
            f"{diff.max_abs_error:.3g}. Tighten atol/rtol to the output's magnitude"
        )


def tolerances(
    expected: Any, atol: float | None, rtol: float | None
) -> tuple[float | None, float | None]:
    """The request's tolerances; where it sets none, a KernelBench problem's own."""
    if atol is not None and rtol is not None:
        return atol, rtol
    peer = formats.kernelbench_tolerance(expected)
    if peer is None:
        return atol, rtol
    return (peer if atol is None else atol), (peer if rtol is None else rtol)


def _judge_by_task(tally: Tally, task: formats.TaskCheck, actual: Any, inputs: Any) -> None:
    """The GPU MODE task's verdict on one call: its check on a copy of the call's data (the
    check may run the reference, which may write into the data) and the judge's output."""
    args = inputs[0] if isinstance(inputs, tuple) and len(inputs) == 2 else None
    own = args[0] if isinstance(args, tuple) and len(args) == 1 else None
    data = clone_args(own if own is not None else task.data)
    why = formats.run_task_check(task, data, actual)
    if why is not None:
        tally.fail(f"output mismatch: the task's check_implementation: {why[:2000]}")
