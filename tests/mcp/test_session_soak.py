"""An agent's session on one server, on a CPU host (tests/soak.py has the session).

The backends this host lacks (ncu, cupti) are asked for as an agent would and must be
refused, naming the backend; every events request, the wrong and the hanging candidate,
the cancel, the bad requests and the restart must end as they should, with no job left
running and no judge or contestant left behind once the client has gone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.soak import leftovers, run_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.usefixtures("own_tempdir")]


async def test_an_agent_session_of_thirty_requests_ends_every_request_as_it_should(
    tmp_path: Path, own_tempdir: Path
) -> None:
    log = await run_session(tmp_path, ("events",), gpu=False, env={"TMPDIR": str(own_tempdir)})
    assert log.requests >= 30, log.lines
    assert not log.problems, "\n".join(log.problems)
    assert not leftovers(own_tempdir), leftovers(own_tempdir)
