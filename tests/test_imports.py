"""The house's import rules (issues 12 and 24): no import circle between ggaudit's modules, every import runs
down the layers (base < format < stores < the jobs < the front doors < the command line), the jobs do not
import each other (scan never imports rows or verify), and the library never imports the command line.

The graph is read from the source, not from a run: every ``import`` and ``from`` statement, at any depth
(a function's deferred import is an import all the same, and runs back up as surely when called). Those
under ``if TYPE_CHECKING:`` never run, so they make no circle (a report's module and the module of the
lines its findings are told in may name each other's types), but they do count for the layers: a module
must not even name a type of a layer above it. (``RowTable`` had such a circle, type-only: defined in
``rows/replay.py`` and named by the ``select``, ``classify`` and ``finite`` modules the replay imports;
it has its own module, ``rows/table.py``, below them all.)"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "ggaudit"

#: The layers, lowest first, by room: a room is a module or package directly under ggaudit/ ("ggaudit":
#: the front door, ggaudit/__init__.py). A module imports from its own layer or the layers below it.
LAYERS: tuple[tuple[str, ...], ...] = (
    # base: no job, no format; each may use the others (no circle: see test_no_import_cycles)
    ("_version", "errors", "escaping", "untrusted", "io", "arrays", "kinds", "diagnostic", "page", "json_shape",
     "outcomes"),
    ("format", "wording", "model_info"),    # what a GGUF is; the words every report's findings are told in
    ("stores",),                            # names to files and the expectations a store keeps
    ("evidence",),                          # the read paths, and which bytes are right: under rows and check
    ("scan", "verify", "rows", "check"),    # the jobs
    ("ggaudit", "fleet"),                   # the front doors: the library's, and the jobs on Dask
    ("cli", "__main__"),                    # the command line
)
#: What a job may use of another job (the jobs are otherwise independent): the rows' finiteness verdict runs
#: scan's kernel over the delivered rows, and `rows --manifest` reads verify's tensor manifest; check feeds
#: scan's consumers and verify's per-tensor digests, and compares them with verify's compare. Both read and
#: decide through the evidence layer below them, and neither imports the other.
JOB_USES: dict[str, frozenset[str]] = {"rows": frozenset({"scan", "verify"}),
                                       "check": frozenset({"scan", "verify"})}
JOBS = LAYERS[4]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


@functools.cache
def _tree(path: Path) -> ast.Module:
    """The parsed source of ``path``, once for all the tests here: they only read the trees."""
    return ast.parse(path.read_text(encoding="utf-8"))


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
    nothing of the package imports it (test_no_module_imports_the_front_door)."""
    parts = target.split(".")
    chain = (".".join(parts[:k]) for k in range(2, len(parts) + 1))
    return [m for m in chain if m in MODULES and not importer.startswith(m + ".")]


def _is_type_checking(node: ast.If) -> bool:
    """``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:``."""
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(node: ast.AST, type_checking: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements under ``node`` at any depth; those under ``if TYPE_CHECKING:`` only if asked."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        elif isinstance(child, ast.If) and _is_type_checking(child) and not type_checking:
            yield from _imports(ast.Module(body=child.orelse, type_ignores=[]), type_checking)
        else:
            yield from _imports(child, type_checking)


def _graph(*, type_checking: bool = True) -> dict[str, set[str]]:
    """Module -> the ggaudit modules it imports, wherever the statement is (module level, a function; an
    ``if TYPE_CHECKING:`` block unless ``type_checking`` is false)."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        edges: set[str] = set()
        for node in _imports(_tree(path), type_checking):
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


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _layer(room: str) -> int:
    return next(i for i, rooms in enumerate(LAYERS) if room in rooms)


def _wrong_way(graph: dict[str, set[str]]) -> list[str]:
    """Every import that runs up the layers, or from one job into another it may not use."""
    found = []
    for importer, edges in sorted(graph.items()):
        here = _room(importer)
        for imported in sorted(edges):
            there = _room(imported)
            if _layer(there) > _layer(here):
                found.append(f"{importer} -> {imported} (up: {here} is below {there})")
            elif here != there and here in JOBS and there in JOBS and there not in JOB_USES.get(here, ()):
                found.append(f"{importer} -> {imported} (one job into another)")
    return found


def test_the_graph_sees_real_imports() -> None:
    graph = _graph()
    assert "ggaudit.format.layout" in graph["ggaudit.scan.run"]
    assert "ggaudit.scan" in graph["ggaudit.fleet.run"]                     # a package's __init__ runs too
    assert "ggaudit.io" in graph["ggaudit.format.layout"]                   # from ..io import opening
    assert "ggaudit.fleet" in graph["ggaudit.cli.scan"]                     # inside a function
    assert "ggaudit.page" in graph["ggaudit.diagnostic"]                    # under if TYPE_CHECKING:
    assert "ggaudit.page" not in _graph(type_checking=False)["ggaudit.diagnostic"]


def test_a_planted_cycle_is_found() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles() -> None:
    """None at all: an import only a type checker follows (``if TYPE_CHECKING:``) ties two rooms as much."""
    assert _cycle(_graph()) is None


def test_every_room_of_the_package_has_a_layer() -> None:
    """A new module or package directly under ggaudit/ is placed in LAYERS, where its imports put it."""
    rooms = {_room(m) for m in MODULES}
    assert sorted(r for r in rooms if not any(r in layer for layer in LAYERS)) == []


def test_planted_wrong_way_imports_are_found() -> None:
    assert _wrong_way({"ggaudit.format.locate": {"ggaudit.verify.stores"}}) == [
        "ggaudit.format.locate -> ggaudit.verify.stores (up: format is below verify)"]
    assert _wrong_way({"ggaudit.scan.run": {"ggaudit.verify.digests"}}) == [
        "ggaudit.scan.run -> ggaudit.verify.digests (one job into another)"]
    assert _wrong_way({"ggaudit.rows.finite": {"ggaudit.scan.kernel"}, "ggaudit.cli.scan": {"ggaudit.io"},
                       "ggaudit.io": {"ggaudit.errors"}}) == []


def test_every_import_runs_down_the_layers() -> None:
    assert _wrong_way(_graph()) == []


def test_no_module_imports_the_front_door() -> None:
    """``from .. import __version__`` would run ggaudit/__init__ (which imports every job) from inside a
    job: a cycle the graph above leaves out. Modules import what they need from where it lives."""
    offenders = []
    for name, path in MODULES.items():
        for node in ast.walk(_tree(path)):
            targets = _targets(node, name, path.name == "__init__.py")
            if "ggaudit" in targets and name != "ggaudit":
                offenders.append(name)
    assert offenders == []
