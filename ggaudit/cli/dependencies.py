"""A dependency ggaudit declares that cannot be imported, in words: the installation's to fix (exit 2), not a
bug, with the command that installs it, quoted for this system's shell."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator

from ..escaping import escape_message
from ..io.shell import shell_word


def missing_dependency(err: ImportError) -> str | None:
    """What ``err`` says of a module ggaudit declares it needs (a dependency in pyproject.toml, or one of an
    extra's), in words with the command that installs it: a module that is not installed, or one that fails
    to import (too old, broken: said with the version installed). None for any other module, ggaudit's own
    included: that is a bug."""
    needed = _declared()
    for module in _modules_of(err):
        top = module.partition(".")[0]
        requirement = needed.get(_normalized(top))
        if requirement is not None:
            return f"ggaudit needs the module {top} ({requirement.spec}), which {_problem(err, top, requirement)}; " \
                   f"install it: {requirement.install}"
    return None


@dataclasses.dataclass(frozen=True)
class _Requirement:
    """One requirement of ggaudit's metadata: as declared (``jinja2>=3.0``), its distribution, its extra."""

    spec: str
    distribution: str
    extra: str | None

    @property
    def install(self) -> str:
        return f"pip install {shell_word(f'ggaudit[{self.extra}]' if self.extra else self.spec)}"


def _problem(err: ImportError, module: str, requirement: _Requirement) -> str:
    if isinstance(err, ModuleNotFoundError) and err.name == module:
        return "is not installed"
    import importlib.metadata  # here, not above: it costs every start of the command line 10-20 ms

    try:
        installed = f"; installed: {requirement.distribution} {importlib.metadata.version(requirement.distribution)}"
    except importlib.metadata.PackageNotFoundError:
        installed = ""
    return f"cannot be imported ({escape_message(str(err)[:200])}{installed})"


def _modules_of(err: ImportError) -> Iterator[str]:
    """The module ``err`` names, then each module whose code raised it, innermost first, up to ggaudit's code
    that called it (a module that raises ImportError itself, or fails on an import of its own, names no module
    or another; what ggaudit's own code raised is ggaudit's)."""
    if err.name:
        yield err.name
    frames = []
    trace = err.__traceback__
    while trace is not None:
        frames.append(str(trace.tb_frame.f_globals.get("__name__", "")))
        trace = trace.tb_next
    for name in reversed(frames):
        if name.partition(".")[0] == __package__:
            return
        yield name


_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")
_EXTRA = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def _declared() -> dict[str, _Requirement]:
    """Every third-party module ggaudit's installed metadata declares, by its name normalized: the name of
    each requirement (each of ggaudit's is its module's), and each extra it asks of it (``dask[distributed]``
    installs the distribution ``distributed``, of that module). Empty when ggaudit runs uninstalled."""
    import importlib.metadata  # here, not above: see _problem

    try:
        requirements = importlib.metadata.requires("ggaudit") or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    declared: dict[str, _Requirement] = {}
    for text in requirements:
        spec, _, marker = text.partition(";")
        name = _REQUIREMENT.match(spec)
        if name is None or _normalized(name[1]) == "ggaudit":
            continue
        extra = _EXTRA.search(marker)
        for module in (name[1], *(name[2] or "").split(",")):
            if module.strip():
                declared.setdefault(_normalized(module.strip()),
                                    _Requirement(spec.strip(), module.strip(), extra[1] if extra else None))
    return declared


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()
