"""Without the 'plot' extra (the README's install), the demo's hint says to install it
first, and `nspy-mcp plot` says the same and exits 2, as a user meets them (issue 45)."""

from __future__ import annotations

import subprocess
import sys

BLOCK = "import sys; sys.modules['matplotlib'] = None; "
"""Python's own way to make a module not importable: as if it were not installed."""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_demos_plot_hint_names_the_extra_only_where_matplotlib_is_missing() -> None:
    hint = "from nspy_mcp.demo import plot_hint; print(plot_hint('r1', '/store'))"
    without = _run(BLOCK + hint)
    assert without.stdout.strip() == (
        "Plot: pip install 'nspy-mcp[plot]', then nspy-mcp plot r1 --store /store"
    ), without.stderr
    assert _run(hint).stdout.strip() == "Plot: nspy-mcp plot r1 --store /store"


def test_plot_without_matplotlib_exits_2_and_says_what_to_install() -> None:
    done = _run(BLOCK + "from nspy_mcp.cli import main; sys.exit(main(['plot', 'r1']))")
    assert done.returncode == 2
    assert "pip install 'nspy-mcp[plot]'" in done.stderr and done.stdout == ""
