"""A new user's first steps on a plain install, from folders outside the repository.

The README's demo, the numpy examples, and an agent's MCP session whose files live in a
folder of their own (absolute paths, no workdir) or beside the server (relative paths, no
workdir), on a venv with `pip install -e .` only: no torch.
"""

from __future__ import annotations

import json
import os
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

from nsight_core.processes.sandbox import landlock_abi
from tests.journeys.conftest import REPO, run, user_env

pytestmark = [pytest.mark.journey, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_the_readmes_demo_runs_on_a_plain_install_from_any_folder(
    plain_python: Path, tmp_path: Path
) -> None:
    demo = run([str(plain_python.parent / "nspy-mcp"), "demo"], tmp_path)
    out = demo.stdout + demo.stderr
    assert demo.returncode == 0, out
    assert "status done" in out, out
    # The first thing a user sees must not tell them to distrust the tool.
    assert "suspicious" not in out, out
    assert "softmax_vectorized passed on every config" in out, out
    assert "softmax_wrong_axis incorrect" in out, out


@pytest.mark.parametrize("example", ["01_profile_softmax_events.py", "03_mcp_client_stdio.py"])
def test_the_numpy_examples_run_on_a_plain_install(
    plain_python: Path, tmp_path: Path, example: str
) -> None:
    ran = run([str(plain_python), str(REPO / "examples" / example)], tmp_path)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]


def _answer(result: CallToolResult) -> dict[str, Any]:
    if result.is_error or result.structured_content is None:
        raise AssertionError(" ".join(getattr(c, "text", "") for c in result.content))
    return dict(result.structured_content)


def _server(python: Path, cwd: Path, store: Path) -> StdioServerParameters:
    tmp = cwd / ".tmp"
    tmp.mkdir(exist_ok=True)
    return StdioServerParameters(
        command=str(python),
        args=["-m", "nspy_mcp", "serve", "--store", str(store)],
        env=user_env(tmp),
        cwd=str(cwd),
    )


def _request(reference: str, candidates: list[str], inputs: str) -> dict[str, Any]:
    return {
        "reference": reference,
        "candidates": candidates,
        "inputs": inputs,
        "configs": [{"rows": 32, "cols": 64}],
        "backend": "events",
        "runs": 3,
        "check": {"seeds": 2},
    }


def _by_annotation(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["Annotation"]: r for r in result["rows"]}


async def test_an_agent_session_with_files_elsewhere_and_beside_the_server(
    plain_python: Path, kernels_elsewhere: Path, tmp_path: Path
) -> None:
    server_dir = tmp_path / "server-cwd"
    server_dir.mkdir()
    # A file beside the server, named by a relative path, with no workdir in the request.
    (server_dir / "local_ref.py").write_text((kernels_elsewhere / "ref.py").read_text())
    secret = tmp_path / "unrelated" / "data.txt"
    secret.parent.mkdir()
    secret.write_text("not the candidate's")
    (kernels_elsewhere / "peek.py").write_text(
        textwrap.dedent(
            f"""
            import numpy as np

            def softmax(x):
                open({str(secret)!r}).read()
                e = np.exp(x - x.max(axis=-1, keepdims=True))
                return e / e.sum(axis=-1, keepdims=True)
            """
        )
    )
    k = kernels_elsewhere
    async with Client(_server(plain_python, server_dir, tmp_path / "store")) as client:
        with anyio.fail_after(240):
            elsewhere = _answer(
                await client.call_tool(
                    "profile_candidates",
                    {
                        "request": _request(
                            f"{k}/ref.py:softmax",
                            [f"{k}/v1.py:softmax", f"{k}/v1.py:wrong", f"{k}/peek.py:softmax"],
                            f"{k}/ref.py:make_inputs",
                        )
                    },
                )
            )
            beside = _answer(
                await client.call_tool(
                    "profile_candidates",
                    {
                        "request": _request(
                            "local_ref.py:softmax",
                            [f"{k}/v1.py:softmax"],
                            "local_ref.py:make_inputs",
                        )
                    },
                )
            )
            t0 = time.monotonic()
            missing = await client.call_tool(
                "profile_candidates",
                {
                    "request": _request(
                        "local_ref.py:softmax",
                        ["nowhere/v9.py:softmax"],
                        "local_ref.py:make_inputs",
                    )
                },
            )
            refused_after = time.monotonic() - t0

    assert elsewhere["status"] == "done", elsewhere["message"]
    rows = _by_annotation(elsewhere)
    ref, good = rows[f"{k}/ref.py:softmax"], rows[f"{k}/v1.py:softmax"]
    for row in (ref, good):
        assert row["NumRuns"] == 3 and row["Trust"] in ("ok", "noisy"), row
    verdicts = {c["Annotation"]: c for c in elsewhere["correctness"]}
    assert verdicts[f"{k}/v1.py:softmax"]["Passed"] is True
    assert verdicts[f"{k}/v1.py:wrong"]["Passed"] is False
    if landlock_abi() > 0 and os.environ.get("NSPY_MCP_CONFINE", "") != "0":
        assert elsewhere["provenance"]["contestant_confined"] is True
        # Reading a file outside the allow-list is the confinement's doing, not a code bug.
        peek = [
            e
            for e in (*elsewhere["failures"], *elsewhere["correctness"])
            if e["Annotation"] == f"{k}/peek.py:softmax" and e.get("ErrorClass")
        ]
        assert peek and {e["ErrorClass"] for e in peek} == {"permission_denied"}, peek
        assert "module-level code" not in json.dumps(peek), peek

    assert beside["status"] == "done", beside["message"]
    assert {r["Trust"] for r in beside["rows"]} <= {"ok", "noisy"}, beside["rows"]

    assert missing.is_error
    text = " ".join(getattr(c, "text", "") for c in missing.content)
    assert "invalid_request" in text and str(server_dir / "nowhere" / "v9.py") in text, text
    assert refused_after < 5, f"a missing file took {refused_after:.1f} s to refuse"


async def test_a_request_that_names_no_backend_answers_on_a_plain_install(
    plain_python: Path, kernels_elsewhere: Path, tmp_path: Path
) -> None:
    """As the README's one-line requests are written: no backend, on a host whatever it has
    (here no GPU and no ncu): the first backend that works answers, and says which."""
    k = kernels_elsewhere
    request = _request(f"{k}/ref.py:softmax", [f"{k}/v1.py:softmax"], f"{k}/ref.py:make_inputs")
    del request["backend"]
    async with Client(_server(plain_python, tmp_path, tmp_path / "store")) as client:
        with anyio.fail_after(240):
            answer = _answer(await client.call_tool("profile_candidates", {"request": request}))
    result = answer
    assert result["status"] == "done", result["message"]
    assert result["provenance"]["backend"] in ("ncu", "cupti", "events")
    assert all(r["Trust"] in ("ok", "noisy") for r in result["rows"]), result["rows"]


def test_plot_on_a_plain_install_says_which_extra_it_needs(
    plain_python: Path, tmp_path: Path
) -> None:
    done = run([str(plain_python.parent / "nspy-mcp"), "plot", "no-such-result"], tmp_path)
    assert done.returncode == 2
    assert "pip install 'nspy-mcp[plot]'" in done.stderr, done.stderr
