"""Problems in the formats of KernelBench and GPU MODE, run as their authors wrote them.

The loader hands every callable it resolves to `adapt`, which recognises three shapes and
wraps them; anything else is used as it is.

- **A KernelBench model** (``problem.py:Model``, ``new.py:ModelNew``): a ``torch.nn.Module``
  subclass. The wrapper builds one instance at its first call, the way KernelBench's harness
  does: the RNGs seeded with `INIT_SEED`, ``get_init_inputs()`` called, seeded again, the
  class called on those arguments under ``no_grad``, then moved to the device of the call's
  inputs; every call runs it under ``no_grad``. The construction arguments come from the
  reference's module, as in KernelBench, where a candidate file holds only ``ModelNew``:
  the first callable a process loads is the reference (the judge loads it before the input
  maker, the contestant before any candidate), so when it is a model class whose module
  defines ``get_init_inputs``, that function supplies every model class of the process; else
  each uses its own module's, if any. The judge and the contestant each
  build their own instances from the same seed, so their weights match and neither sees
  the other's. The construction's RNG use is fenced off (``fork_rng``), so the judge's
  per-call seeding of the inputs is untouched.
- **A KernelBench input maker** (``get_inputs`` in a module that also defines
  ``get_init_inputs``): its list becomes positional arguments. Where CUDA is available it
  runs with CUDA as the default device and its tensors are moved there, since KernelBench's
  files make CPU tensors that its harness moves to the GPU. Loading one, or a reference that
  is a model class, tells the judge's verdict (`kernelbench_tolerance`) that outputs are
  compared with KernelBench's tolerances when the request sets none.
- **A GPU MODE input maker** (``generate_input`` of a task's ``reference.py``: a function
  with a ``seed`` parameter in a module that defines ``check_implementation``): it is called
  with the config (a test of ``task.yml``) and ``seed`` replaced by a fresh value drawn from
  the judge's per-call seeding, which the contestant never sees; its ``data`` is passed to
  ``ref_kernel(data)`` and ``custom_kernel(data)`` as the one argument. Loading it registers
  the task's ``check_implementation`` (`task_check`), which the judge's verdict then calls on
  a copy of that call's ``data`` and the judge's own copy of the output, in place of its
  own comparison.

Only the judge loads input makers, so the verdict's state (`problem_kind`, `task_check`)
exists in the judge alone. Each job process serves one job, so this module's state is the
job's.
"""

from __future__ import annotations

import inspect
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

from nsight_core.runtime.leaves import leaves

INIT_SEED = 42
"""KernelBench's default seed (``seed_num``), set before ``get_init_inputs()`` and before
each model's construction, so that the reference's and a candidate's parameters match."""

KERNELBENCH_TOLERANCES: dict[str, float] = {
    # KernelBench's `get_tolerance_for_precision` (after torchbench), used as both atol and
    # rtol of `torch.allclose`; its releases before v0.2 used 1e-2 for float32 too.
    "float32": 1e-4,
    "float16": 1e-2,
    "bfloat16": 1e-2,
}
"""atol = rtol by output dtype for KernelBench problems; other dtypes keep our defaults."""

TASK_SEED_BITS = 31
"""A GPU MODE task's per-call seed is below 2**31: it suits torch and numpy generators
alike, and tasks that add a row index or the seed itself to their values (sorting tasks
shift each row's mean by its seed) stay in the ranges their authors tested."""

ProblemKind = Literal["kernelbench", "gpumode"]


@dataclass
class TaskCheck:
    """A GPU MODE task's own check, and the data of the judge's latest call to check with."""

    check: Callable[[Any, Any], Any]
    data: Any = None


@dataclass
class _State:
    loads: int = 0
    init_inputs: Callable[[], Any] | None = None
    kind: ProblemKind | None = None
    task: TaskCheck | None = None


_state = _State()


def problem_kind() -> ProblemKind | None:
    """Which format's input maker this process loaded (the judge's alone), if any."""
    return _state.kind


def task_check() -> TaskCheck | None:
    """The GPU MODE task's check this process registered (the judge's alone), if any."""
    return _state.task


def adapt(target: object, module: ModuleType, attr: str) -> object:
    """``target`` (resolved from ``module`` as ``attr``), wrapped when it is one of the shapes
    the module docstring lists; otherwise ``target`` itself."""
    first = _state.loads == 0
    _state.loads += 1
    if _is_module_class(target):
        assert isinstance(target, type)
        own = _function(module, "get_init_inputs")
        if first:  # the reference
            _state.kind = _state.kind or "kernelbench"
            _state.init_inputs = own
        return module_caller(target, _state.init_inputs or own)
    if not inspect.isfunction(target):
        return target
    name = attr.rpartition(".")[2]
    if name == "get_inputs" and _function(module, "get_init_inputs") is not None:
        _state.kind = "kernelbench"
        return kernelbench_inputs(target)
    check = _function(module, "check_implementation")
    if check is not None and "seed" in inspect.signature(target).parameters:
        _state.kind = "gpumode"
        _state.task = TaskCheck(check)
        return task_inputs(target, _state.task)
    return target


def _function(module: ModuleType, name: str) -> Callable[..., Any] | None:
    value = getattr(module, name, None)
    return value if callable(value) else None


def _is_module_class(target: object) -> bool:
    torch = sys.modules.get("torch")
    return (
        torch is not None
        and isinstance(target, type)
        and issubclass(target, torch.nn.Module)
        and target is not torch.nn.Module
    )


def module_caller(cls: type, init_inputs: Callable[[], Any] | None) -> Callable[..., Any]:
    """Calls an instance of ``cls`` built at the first call (see the module docstring)."""
    torch = sys.modules["torch"]
    built: list[Any] = []

    def call(*args: Any, **kwargs: Any) -> Any:
        if not built:
            built.append(build_model(cls, init_inputs, _device_of(torch, args, kwargs)))
        with torch.no_grad():
            return built[0](*args, **kwargs)

    # The contestant watches the reference's module by this name (integrity.py).
    call.__module__ = cls.__module__
    call.__name__ = cls.__name__
    call.__qualname__ = cls.__qualname__
    call.__doc__ = cls.__doc__
    return call


def build_model(cls: type, init_inputs: Callable[[], Any] | None, device: Any) -> Any:
    """KernelBench's construction: seeded init inputs, seeded construction, then the device."""
    torch = sys.modules["torch"]
    forked = []
    if device.type == "cuda":
        forked = [device.index if device.index is not None else torch.cuda.current_device()]
    with torch.random.fork_rng(devices=forked):
        torch.manual_seed(INIT_SEED)
        made = list(init_inputs()) if init_inputs is not None else []
        args = [x.to(device) if isinstance(x, torch.Tensor) else x for x in made]
        torch.manual_seed(INIT_SEED)
        try:
            with torch.no_grad():
                model = cls(*args)
        except Exception as exc:
            source = getattr(init_inputs, "__module__", None) or "no get_init_inputs"
            exc.add_note(
                f"while building {cls.__name__}(*get_init_inputs()) with {len(args)} "
                f"argument(s) from {source}"
            )
            raise
        return model.to(device)


def _device_of(torch: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The device of the call's first tensor; the CPU when it has none."""
    for value in leaves((args, kwargs)):
        if isinstance(value, torch.Tensor):
            return value.device
    return torch.device("cpu")


def kernelbench_inputs(get_inputs: Callable[..., Any]) -> Callable[..., Any]:
    """``get_inputs`` whose list becomes positional arguments, made on CUDA where it is."""

    def make(**config: Any) -> Any:
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_available():
            made = get_inputs(**config)
            return tuple(made) if isinstance(made, list) else made
        with torch.device("cuda"):
            made = get_inputs(**config)
        if not isinstance(made, list | tuple):
            return made.cuda() if isinstance(made, torch.Tensor) else made
        return tuple(x.cuda() if isinstance(x, torch.Tensor) else x for x in made)

    make.__module__ = get_inputs.__module__
    make.__name__ = get_inputs.__name__
    return make


def task_inputs(generate_input: Callable[..., Any], task: TaskCheck) -> Callable[..., Any]:
    """``generate_input(**test, seed=fresh)`` as one positional argument, ``data``."""

    def make(**config: Any) -> tuple[Any]:
        # The judge seeded `random` for this call from its secret generator just before.
        seed = random.getrandbits(TASK_SEED_BITS)
        data = generate_input(**{**config, "seed": seed})
        task.data = data
        return (data,)

    make.__module__ = generate_input.__module__
    make.__name__ = generate_input.__name__
    return make


def kernelbench_tolerance(expected: Any) -> float | None:
    """atol = rtol for ``expected`` in a KernelBench problem: by its first floating leaf's
    dtype; None where KernelBench has no value (then the dtype defaults apply)."""
    if _state.kind != "kernelbench":
        return None
    for leaf in leaves(expected):
        dtype = getattr(leaf, "dtype", None)
        if dtype is not None and getattr(dtype, "is_floating_point", False):
            return KERNELBENCH_TOLERANCES.get(str(dtype).removeprefix("torch."))
    return None


def run_task_check(task: TaskCheck, data: Any, output: Any) -> str | None:
    """Why the task's ``check_implementation(data, output)`` refused the output; None when it
    accepted it. It may answer ``''`` or an error text (older tasks), ``(good, message)``
    (newer ones) or a bool."""
    try:
        answer = task.check(data, output)
    except Exception as exc:
        return f"check_implementation raised {type(exc).__name__}: {exc}"
    if isinstance(answer, str):
        return answer or None
    if isinstance(answer, bool):
        return None if answer else "check_implementation returned False"
    if isinstance(answer, tuple | list) and len(answer) == 2 and isinstance(answer[0], bool):
        good, message = answer
        return None if good else (str(message) or "check_implementation returned False")
    return (
        f"check_implementation returned a {type(answer).__name__}; a task's check returns "
        "'' or an error text, or (good, message)"
    )
