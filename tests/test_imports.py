"""The project's import graph, read with ast: no cycles, and project imports at module top.

A cycle hidden by function-local imports is still a cycle: every import of a project module
counts, wherever it sits. The exceptions are imports only for type checking (they never
run) and documented lazy imports, marked ``# lazy: why`` on the line, that defer a heavy
dependency (the MCP SDK for the CLI's people commands) to the call that needs it.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from nsight_core.collectors import BACKENDS

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("nsight_core", "nspy_mcp")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _imports(
    module: str, path: Path, known: dict[str, Path], tree: ast.Module | None = None
) -> list[tuple[str, ast.Import | ast.ImportFrom]]:
    tree = tree or ast.parse(path.read_text())
    out: list[tuple[str, ast.Import | ast.ImportFrom]] = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        for name in names:
            target = _resolve(name, known)
            if target is not None and target != module:
                out.append((target, node))
    return out


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {m: {t for t, _ in _imports(m, p, known)} for m, p in known.items()}


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in ast.walk(node):
                if hasattr(sub, "lineno"):
                    lines.add(sub.lineno)
    return lines


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every elementary cycle's smallest representative (Tarjan's components, then a path)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return comps


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_in_the_packages() -> None:
    graph = _graph()
    # TYPE_CHECKING-only imports never run, so they cannot form a cycle at import time.
    known = _modules()
    for module, path in known.items():
        tree = ast.parse(path.read_text())
        guarded = _type_checking_lines(tree)
        lines = path.read_text().splitlines()
        graph[module] = {
            t
            for t, node in _imports(module, path, known, tree)
            if node.lineno not in guarded and "# lazy:" not in lines[node.lineno - 1]
        }
    assert find_cycles(graph) == []


def test_project_imports_sit_at_module_top_unless_marked_lazy() -> None:
    known = _modules()
    offenders = []
    for module, path in known.items():
        text = path.read_text().splitlines()
        tree = ast.parse(path.read_text())
        top = {id(n) for n in tree.body}
        for n in tree.body:
            if isinstance(n, ast.If | ast.Try):
                top.update(id(s) for s in ast.walk(n))
        for target, node in _imports(module, path, known, tree):
            if id(node) in top or "# lazy:" in text[node.lineno - 1]:
                continue
            offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {target}")
    assert offenders == []


LAYERS: list[tuple[str, tuple[str, ...], str]] = [
    (
        "nsight_core.judge",
        ("nsight_core.contestant",),
        "the trusted judge never leans on the untrusted contestant's modules",
    ),
    (
        "nsight_core.protocol",
        ("nsight_core.processes", "nsight_core.judge", "nsight_core.contestant"),
        "the messages every side imports sit below the process machinery",
    ),
    (
        "nsight_core.runtime",
        ("nsight_core.processes", "nsight_core.judge", "nsight_core.contestant"),
        "what both job processes run on depends on neither of them",
    ),
    (
        "nsight_core.processes",
        ("nsight_core.standby", "nsight_core.judge", "nsight_core.contestant"),
        "what the server and the judge both run to start processes depends on neither side",
    ),
    (
        "nsight_core",
        ("nspy_mcp",),
        "the engine never imports the server",
    ),
]


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_layers_hold() -> None:
    """Every import, lazy ones included: a lazy import still runs in that process."""
    graph = _graph()
    broken = [
        f"{module} imports {target}: {why}"
        for low, forbidden, why in LAYERS
        for module, targets in graph.items()
        if _in(module, low)
        for target in targets
        if any(_in(target, f) for f in forbidden)
    ]
    assert broken == []


SERVER_ONLY = (
    "nspy_mcp",
    "nsight_core.pipeline",
    "nsight_core.stages",
    "nsight_core.staging",
    "nsight_core.store",
    "nsight_core.rows",
    "nsight_core.standby",
)
"""What only the server runs: queueing, staging, the store, building rows and diagnoses.
(A backend's module holds its server side too, the preflight and the host probe it asks,
so the job processes load those modules without running them.)"""
PROCESSES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "judge": (("nsight_core.judge.boot",), (*SERVER_ONLY, "nsight_core.contestant")),
    "contestant": (
        ("nsight_core.contestant.core", "nsight_core.contestant.__main__"),
        (*SERVER_ONLY, "nsight_core.judge", "nsight_core.processes.seat"),
    ),
}
"""Each job process: the modules it starts from, and what it must never load."""


def _runs_in(entries: tuple[str, ...]) -> set[str]:
    """Every project module a process started at ``entries`` loads: their imports, lazy ones
    included (TYPE_CHECKING ones never run), each module's packages, and every backend's
    module once `nsight_core.collectors` is loaded (`get_backend` imports them by name)."""
    known = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        tree = ast.parse(path.read_text())
        guarded = _type_checking_lines(tree)
        graph[module] = {
            t for t, n in _imports(module, path, known, tree) if n.lineno not in guarded
        }
    graph["nsight_core.collectors"] |= {f"nsight_core.collectors.{b}" for b in BACKENDS}
    seen: set[str] = set()
    todo = list(entries)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        parts = module.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        todo.extend(graph.get(module, ()))
    return seen & set(known)


def test_each_job_process_loads_nothing_of_the_servers_side_or_the_other_process() -> None:
    for process, (entries, never) in PROCESSES.items():
        loaded = _runs_in(entries)
        assert set(entries) <= loaded
        wrong = sorted(m for m in loaded if any(_in(m, n) for n in never))
        assert wrong == [], f"the {process} loads {wrong}"


def test_the_judge_and_the_contestant_are_imported_only_from_their_own_process() -> None:
    """Their folders are their processes': the server starts them by module path
    (``python -m``) and reads their files, never their code."""
    graph = _graph()
    broken = [
        f"{module} imports {target}"
        for module, targets in graph.items()
        for target in targets
        for own in ("nsight_core.judge", "nsight_core.contestant")
        if _in(target, own) and not _in(module, own)
    ]
    assert broken == []


def test_the_engines_top_level_stays_small() -> None:
    """Modules live in folders that follow the flow; at most 12 are left at the top."""
    top = [p.name for p in (ROOT / "nsight_core").glob("*.py") if p.name != "__init__.py"]
    assert len(top) <= 12, sorted(top)


def test_only_the_engine_config_reads_the_servers_settings() -> None:
    """`nsight_core.plan.config` reads the ``NSPY_MCP_*`` settings once, for the server, the
    CLI and the `@kernel` API to pass down: no other engine module names one in its code
    (text that mentions one, a docstring or a message, is fine)."""
    offenders = []
    for path in sorted((ROOT / "nsight_core").rglob("*.py")):
        if path.relative_to(ROOT).as_posix() == "nsight_core/plan/config.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and re.fullmatch(r"NSPY_MCP_[A-Z_]+", node.value)
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value[:60]!r}")
    assert offenders == [], "read it from EngineConfig (nsight_core/plan/config.py) instead"


MAX_MODULE_LINES = 500
"""A module past this is split along its seams into modules named for what they hold."""
LONG_MODULES: frozenset[str] = frozenset()
"""The modules still allowed past `MAX_MODULE_LINES`, until they are split too."""


def test_no_module_outgrows_the_line_limit_unless_listed() -> None:
    sizes = {
        path.relative_to(ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for pkg in PACKAGES
        for path in sorted((ROOT / pkg).rglob("*.py"))
    }
    over = {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES}
    offenders = sorted(f"{name}: {n} lines" for name, n in over.items() if name not in LONG_MODULES)
    assert offenders == [], f"split these along their seams (at most {MAX_MODULE_LINES} lines)"


ISSUE_NUMBER = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)
"""A tracker reference ("issue 15"): the issue's number says nothing to a reader of the
code and its state goes stale; the reason it names belongs in the text instead."""


def issue_mentions(source: str) -> list[tuple[int, str]]:
    """(line, text) of each comment or docstring of `source` that names an issue number.

    Comments come from tokenize (a '#' inside a string is no comment); docstrings from ast:
    every bare string statement, which covers module, class and function docstrings and the
    attribute docstrings under assignments. Strings the code uses (messages, descriptions)
    are neither, so they may name an issue."""
    texts: list[tuple[int, str]] = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            texts.append((tok.start[0], tok.string))
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            texts.append((node.lineno, node.value.value))
    return sorted((line, text) for line, text in texts if ISSUE_NUMBER.search(text))


def test_the_issue_finder_reads_comments_and_docstrings_only() -> None:
    source = (
        '"""Module (issue 3)."""\n'
        "X = 1  # see Issue #4\n"
        '"""Attribute docstring, issues 5 and 6."""\n'
        "def f() -> str:\n"
        '    """Why, not which issue."""\n'
        '    return "issue 7 # issue 8"\n'
    )
    assert [line for line, _ in issue_mentions(source)] == [1, 2, 3]


def test_no_issue_numbers_in_comments_or_docstrings() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {text.strip()[:80]!r}"
        for path in _modules().values()
        for line, text in issue_mentions(path.read_text(encoding="utf-8"))
    ]
    assert offenders == [], "say the reason, not the issue number (numbers go in commits)"
