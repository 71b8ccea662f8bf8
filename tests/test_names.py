"""Names that say what a thing is, once (issue 24, item 8): no two classes of the package share a name (two
``Mismatch`` classes, two ``Prepared``, were two things a reader had to tell apart by module), and a
progress callback has one type, ``ggaudit.io.fan_out.Progress``, which every ``progress`` parameter is."""

from __future__ import annotations

import ast
import functools
import typing
from collections import defaultdict

from ggaudit.io.fan_out import Progress
from ggaudit.rows.replay import ReadPathProgress
from support import REPO

PACKAGE = REPO / "ggaudit"
#: The one type of a progress callback, and rows' (the same, told which read path first).
PROGRESS_TYPES = {"Progress", "ReadPathProgress"}


@functools.cache
def _trees() -> dict[str, ast.Module]:
    """Every module of the package, parsed once for all the tests here."""
    return {p.relative_to(REPO).as_posix(): ast.parse(p.read_text(encoding="utf-8"))
            for p in sorted(PACKAGE.rglob("*.py"))}


def _classes() -> dict[str, list[str]]:
    """Each class name defined anywhere in the package (nested classes too) -> the modules defining it."""
    where: dict[str, list[str]] = defaultdict(list)
    for module, tree in _trees().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(module)
    return where


def _module_aliases() -> dict[str, list[tuple[str, str]]]:
    """Module-level ``NAME = Callable[...]`` aliases: their text -> (module, name) of each."""
    found: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for module, tree in _trees().items():
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and ast.unparse(node.value).startswith("Callable["):
                found[ast.unparse(node.value)].append((module, node.targets[0].id))
    return found


def test_no_two_classes_of_the_package_share_a_name() -> None:
    shared = {name: modules for name, modules in _classes().items() if len(modules) > 1}
    assert shared == {}


def test_the_walk_finds_the_classes_it_is_about() -> None:
    """The walk itself: the renamed classes are found where they live, and their old names nowhere."""
    classes = _classes()
    assert classes["RowMismatch"] == ["ggaudit/rows/classify.py"]
    assert classes["ReadyWave"] == ["ggaudit/rows/gather.py"]
    assert classes["ManifestWritten"] == ["ggaudit/verify/manifests/report.py"]
    assert "Prepared" not in classes


def test_a_progress_callback_has_one_type_defined_in_io() -> None:
    aliases = _module_aliases()
    assert aliases["Callable[[int, int], None]"] == [("ggaudit/io/fan_out.py", "Progress")]
    named = sorted((module, name) for found in aliases.values() for module, name in found if "Progress" in name)
    assert named == [("ggaudit/io/fan_out.py", "Progress"), ("ggaudit/rows/options.py", "ReadPathProgress")]
    # rows' is io's with the read path put first: (mode, done, total).
    assert typing.get_args(ReadPathProgress)[0] == [str, *typing.get_args(Progress)[0]]


def test_every_progress_parameter_is_of_the_progress_type() -> None:
    """A function taking ``progress`` takes a Progress (rows' a ReadPathProgress), never a callable of its
    own shape (the scan's internals are told bytes newly read: ``advance``)."""
    other: list[tuple[str, str, str]] = []
    for module, tree in _trees().items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
                annotations = [ast.unparse(a.annotation) for a in args if a.arg == "progress" and a.annotation]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                    and node.target.id == "progress":
                annotations = [ast.unparse(node.annotation)]
            else:
                continue
            named = {a.removeprefix("InitVar[").removesuffix("]").removesuffix(" | None") for a in annotations}
            other.extend((module, getattr(node, "name", "progress"), a) for a in named - PROGRESS_TYPES)
    assert other == []
