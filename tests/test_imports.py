"""The house's import rules (issue 12): no import cycles between ggaudit's modules, the jobs do not import
each other (scan never imports rows), and the library never imports the command line."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "ggaudit"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _resolve(node: ast.ImportFrom, name: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = name.split(".") if is_package else name.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(node: ast.AST, name: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        source = _resolve(node, name, is_package)
        # ``from pkg import module`` imports the module; ``from module import name`` the module itself.
        return [f"{source}.{a.name}" if f"{source}.{a.name}" in MODULES else source for a in node.names]
    return []


def _with_parents(target: str, importer: str) -> list[str]:
    """Importing a.b.c runs a/__init__ and a/b/__init__ first, except the packages the importer is inside
    (they are already running). The front door (``ggaudit``) is left out: it imports everything, and
    nothing of the package imports it."""
    parts = target.split(".")
    chain = (".".join(parts[:k]) for k in range(2, len(parts) + 1))
    return [m for m in chain if m in MODULES and not importer.startswith(m + ".")]


def _graph() -> dict[str, set[str]]:
    """Module -> the modules its top-level statements import (function-level imports are deferred)."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        edges: set[str] = set()
        for node in tree.body:
            for target in _targets(node, name, path.name == "__init__.py"):
                edges.update(m for m in _with_parents(target, name) if m != name)
        graph[name] = edges
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_the_graph_sees_real_imports() -> None:
    graph = _graph()
    assert "ggaudit.format.layout" in graph["ggaudit.scan.run"]
    assert "ggaudit.verify.stores" in graph["ggaudit.format.locate"]       # a package's __init__ runs too
    assert "ggaudit.io" in graph["ggaudit.format.layout"]                  # from .. import io


def test_a_planted_cycle_is_found() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles() -> None:
    assert _cycle(_graph()) is None


def test_scan_never_imports_rows_and_the_library_never_imports_the_cli() -> None:
    graph = _graph()
    for name, edges in graph.items():
        if name.startswith("ggaudit.scan"):
            assert not [e for e in edges if e.startswith("ggaudit.rows")], name
        if not name.startswith("ggaudit.cli") and name not in ("ggaudit.__main__",):
            assert not [e for e in edges if e.startswith("ggaudit.cli")], name


def test_no_module_imports_the_front_door() -> None:
    """``from .. import __version__`` would run ggaudit/__init__ (which imports every job) from inside a
    job: a cycle the graph above leaves out. Modules import what they need from where it lives."""
    offenders = []
    for name, path in MODULES.items():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            targets = _targets(node, name, path.name == "__init__.py")
            if "ggaudit" in targets and name != "ggaudit":
                offenders.append(name)
    assert offenders == []
