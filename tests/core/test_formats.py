"""KernelBench models and input makers, GPU MODE input makers and checks, as the loader
hands them to the judge and the contestant (runtime/formats.py), on real torch modules.

The problem files are ours, written in the two formats; jobs end to end are in
tests/mcp/test_formats_mcp.py.
"""

from __future__ import annotations

import random
import textwrap
from pathlib import Path
from typing import Any

import pytest

from nsight_core.judge.verdict import Tally, judge_output, trivial_bound
from nsight_core.request import ProfileRequest, default_inputs
from nsight_core.runtime import formats
from nsight_core.runtime.loader import load_callable

torch = pytest.importorskip("torch")

PROBLEM = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features: int, scale: float):
        super().__init__()
        self.proj = nn.Linear(features, features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.proj(x)) * self.scale


def get_inputs():
    return [torch.rand(4, 8), torch.rand(3)]


def get_init_inputs():
    return [8, 0.5]
"""

CANDIDATE = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features: int, scale: float):
        super().__init__()
        self.proj = nn.Linear(features, features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.proj(x)
        return (1 - 2 / (torch.exp(2 * y) + 1)) * self.scale
"""

TASK = """
import torch

SEEDS = []


def ref_kernel(data):
    x, k = data
    return x * k


def generate_input(size: int, seed: int):
    SEEDS.append(seed)
    gen = torch.Generator()
    gen.manual_seed(seed)
    return torch.rand(size, generator=gen), 3.0


def check_implementation(data, output):
    return bool(torch.equal(output, ref_kernel(data))), "not equal"
"""


@pytest.fixture(autouse=True)
def fresh_formats_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a job process knows of its problem is per process: each test starts afresh, and
    no other test of this process sees what these loaded."""
    monkeypatch.setattr(formats, "_state", formats._State())


def write(root: Path, name: str, code: str) -> None:
    (root / name).write_text(textwrap.dedent(code))


def test_a_kernelbench_model_is_built_like_kernelbench_builds_it_and_runs_without_grad(
    tmp_path: Path,
) -> None:
    write(tmp_path, "problem.py", PROBLEM)
    model = load_callable("problem.py:Model", workdir=tmp_path, source_file=None)
    x = torch.rand(4, 8)
    out = model(x)

    problem = __import__("sys").modules[model.__module__]
    torch.manual_seed(42)
    init = problem.get_init_inputs()
    torch.manual_seed(42)
    expected = problem.Model(*init)(x)
    assert torch.equal(out, expected)
    assert not out.requires_grad  # KernelBench calls its models under no_grad
    assert model.__name__ == "Model"  # the contestant watches the reference's module by it
    assert formats.problem_kind() == "kernelbench"  # a model-class reference: its tolerances


def test_a_model_class_after_a_function_reference_uses_its_own_init_inputs(
    tmp_path: Path,
) -> None:
    write(tmp_path, "plain.py", "def ref(x):\n    return x\n")
    write(tmp_path, "problem.py", PROBLEM)
    load_callable("plain.py:ref", workdir=tmp_path, source_file=None)  # the reference
    model = load_callable("problem.py:Model", workdir=tmp_path, source_file=None)
    assert tuple(model(torch.rand(4, 8)).shape) == (4, 8)  # built from get_init_inputs
    assert formats.problem_kind() is None  # not a KernelBench problem: our tolerances


def test_a_candidate_class_gets_the_references_init_inputs_and_the_same_weights(
    tmp_path: Path,
) -> None:
    write(tmp_path, "problem.py", PROBLEM)
    write(tmp_path, "new.py", CANDIDATE)  # no get_init_inputs, as KernelBench's are written
    reference = load_callable("problem.py:Model", workdir=tmp_path, source_file=None)
    candidate = load_callable("new.py:ModelNew", workdir=tmp_path, source_file=None)
    x = torch.rand(4, 8)
    assert torch.allclose(reference(x), candidate(x), atol=1e-6)


def test_building_a_model_leaves_the_callers_random_stream_alone(tmp_path: Path) -> None:
    write(tmp_path, "problem.py", PROBLEM)
    model = load_callable("problem.py:Model", workdir=tmp_path, source_file=None)
    torch.manual_seed(7)
    x = torch.rand(4, 8)
    untouched = torch.rand(3)
    torch.manual_seed(7)
    x = torch.rand(4, 8)
    model(x)  # the first call builds the model, seeding with 42 inside
    assert torch.equal(torch.rand(3), untouched)


def test_a_construction_that_fails_says_which_init_inputs_it_was_given(tmp_path: Path) -> None:
    write(tmp_path, "problem.py", PROBLEM.replace("return [8, 0.5]", "return [8]"))
    model = load_callable("problem.py:Model", workdir=tmp_path, source_file=None)
    with pytest.raises(TypeError) as info:
        model(torch.rand(4, 8))
    assert any("Model(*get_init_inputs()) with 1 argument" in n for n in info.value.__notes__)


def test_a_kernelbench_input_maker_gives_positional_arguments(tmp_path: Path) -> None:
    write(tmp_path, "problem.py", PROBLEM)
    made = load_callable("problem.py:get_inputs", workdir=tmp_path, source_file=None)()
    assert isinstance(made, tuple)
    assert [tuple(t.shape) for t in made] == [(4, 8), (3,)]
    assert formats.problem_kind() == "kernelbench"


def test_kernelbench_tolerances_apply_where_the_request_sets_none(tmp_path: Path) -> None:
    expected = torch.ones(64)
    close = expected + 5e-5  # within KernelBench's float32 1e-4, outside our 1e-5
    before = Tally()
    judge_output(before, expected, close, atol=None, rtol=None, bound=None)
    assert not before.passed

    write(tmp_path, "problem.py", PROBLEM)
    load_callable("problem.py:get_inputs", workdir=tmp_path, source_file=None)
    kb = Tally()
    judge_output(kb, expected, close, atol=None, rtol=None, bound=None)
    assert kb.passed
    strict = Tally()
    judge_output(strict, expected, close, atol=1e-6, rtol=1e-6, bound=None)
    assert not strict.passed  # the request's own tolerances win
    half = Tally()
    judge_output(half, expected.half(), (expected + 5e-3).half(), atol=None, rtol=None, bound=None)
    assert half.passed  # float16: 1e-2


def test_the_trivial_answer_bound_uses_kernelbench_tolerances_too(tmp_path: Path) -> None:
    small = torch.tensor([0.0, 1e-4] * 32)  # zeros and its mean pass 1e-4, not 1e-5
    assert trivial_bound(small, ((), {}), None, None) is None
    write(tmp_path, "problem.py", PROBLEM)
    load_callable("problem.py:get_inputs", workdir=tmp_path, source_file=None)
    bound = trivial_bound(small, ((), {}), None, None)
    assert bound is not None and bound.name == "a constant (the mean)"


def test_a_gpu_mode_input_maker_gets_a_fresh_seed_and_its_data_is_one_argument(
    tmp_path: Path,
) -> None:
    write(tmp_path, "reference.py", TASK)
    make = load_callable("reference.py:generate_input", workdir=tmp_path, source_file=None)
    random.seed(1)
    (data,) = make(size=5, seed=4242)
    random.seed(2)
    (other,) = make(size=5, seed=4242)
    seeds = __import__("sys").modules[make.__module__].SEEDS
    assert 4242 not in seeds and seeds[0] != seeds[1]
    assert all(0 <= s < 2**31 for s in seeds)
    assert not torch.equal(data[0], other[0])
    task = formats.task_check()
    assert task is not None and task.data is other  # the judge's latest call's data
    assert formats.problem_kind() == "gpumode"


def test_the_tasks_check_decides_on_a_copy_of_the_calls_data(tmp_path: Path) -> None:
    write(tmp_path, "reference.py", TASK)
    make = load_callable("reference.py:generate_input", workdir=tmp_path, source_file=None)
    ((x, k),) = make(size=5, seed=1)
    right, wrong = Tally(), Tally()
    judge_output(right, x * k, x * k, atol=None, rtol=None, bound=None)
    judge_output(wrong, x * k, x * k + 1e-7, atol=None, rtol=None, bound=None)
    assert right.passed
    assert not wrong.passed  # within our tolerance, but the task's check is exact
    assert wrong.reasons == ["output mismatch: the task's check_implementation: not equal"]


@pytest.mark.parametrize(
    ("answer", "refused"),
    [
        ("", None),
        ("mismatch found!", "mismatch found!"),
        ((True, ""), None),
        ((False, "3 elements differ"), "3 elements differ"),
        (False, "check_implementation returned False"),
        (None, "check_implementation returned a NoneType"),
    ],
)
def test_a_tasks_check_may_answer_text_a_pair_or_a_bool(answer: Any, refused: str | None) -> None:
    why = formats.run_task_check(formats.TaskCheck(lambda data, out: answer), None, None)
    assert why == refused or (refused is not None and why is not None and why.startswith(refused))


def test_a_tasks_check_that_raises_refuses_the_output() -> None:
    def check(data: Any, output: Any) -> str:
        raise ValueError("output must be a tensor")

    why = formats.run_task_check(formats.TaskCheck(check), None, None)
    assert why == "check_implementation raised ValueError: output must be a tensor"


def test_an_omitted_inputs_names_the_input_maker_beside_the_reference() -> None:
    kb = ProfileRequest(reference="level1/19_ReLU.py:Model", candidates=["new.py:ModelNew"])
    assert kb.inputs == "level1/19_ReLU.py:get_inputs"
    assert kb.configs == [{}]
    task = ProfileRequest.model_validate(
        {
            "reference": "reference.py:ref_kernel",
            "candidates": ["submission.py:custom_kernel"],
            "inputs": None,
        }
    )
    assert task.inputs == "reference.py:generate_input"
    assert default_inputs("pkg.problem:Model") == "pkg.problem:get_inputs"
    given = ProfileRequest(reference="r.py:Model", candidates=["c.py:M"], inputs="m.py:make")
    assert given.inputs == "m.py:make"
