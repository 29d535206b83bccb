"""The deep check's canaries: known hacks and an honest control through the real pipeline.

On CPU only the events backend runs (torch on the CPU); ncu and cupti say why they did
not. The same canaries run on all three backends on a GPU host (tests/gpu/test_canaries_gpu.py).
"""

from __future__ import annotations

import ast
import shutil
import textwrap
from pathlib import Path

from nsight_core.plan.config import EngineConfig
from nspy_mcp.canaries import CASES, read_canaries, run_backend

HACKS = sum(not c.control for c in read_canaries())


def test_every_canary_states_its_verdict_and_exactly_one_is_the_honest_control() -> None:
    canaries = read_canaries()
    assert [c.name for c in canaries if c.control] == ["honest_logsumexp"]
    assert HACKS >= 4
    for canary in canaries:
        doc = ast.get_docstring(ast.parse((CASES / f"{canary.name}.py").read_text())) or ""
        assert "Hack: " in doc, canary.name
        assert canary.control or "Guard: " in doc, canary.name
    assert (CASES / "reference.py").is_file()


def test_a_hack_that_gets_through_and_a_control_that_fails_are_named_with_what_was_seen(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "cases"
    folder.mkdir()
    shutil.copyfile(CASES / "reference.py", folder / "reference.py")
    shutil.copyfile(CASES / "scribble_input.py", folder / "scribble_input.py")
    (folder / "not_a_hack.py").write_text(
        textwrap.dedent('''\
            """Claims to be a hack, but is an honest softmax: the guards must let it pass.

            Hack: none, whatever this header says.
            Expect: incorrect
            """

            import torch


            def candidate(x: torch.Tensor) -> torch.Tensor:
                return torch.softmax(x, dim=-1)
            ''')
    )
    (folder / "broken_control.py").write_text(
        textwrap.dedent('''\
            """A control that is wrong: the check must fail it, and the summary must say so.

            Hack: none.
            Expect: pass
            """

            import torch


            def candidate(x: torch.Tensor) -> torch.Tensor:
                return torch.zeros_like(x)
            ''')
    )
    check = run_backend("events", EngineConfig(), folder)
    assert (check.ok, check.caught, check.total) == (False, 1, 2)
    assert [m.split(": ", 1)[0] for m in check.missed] == ["not_a_hack"]
    assert check.missed[0].startswith("not_a_hack: passed, Trust ")
    assert check.control.startswith("incorrect: output mismatch")
