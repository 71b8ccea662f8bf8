"""The exception hierarchy: every error ggaudit raises on bad input is a GGAuditError.

Each error renders as one line naming the file, and where it is known the byte offset and the field,
so the CLI can print ``str(err)`` and exit 2 without a traceback.

Escaping, one rule: ``path``, ``field`` and ``message`` hold text as it is, and ``str(err)`` makes each part
safe for a terminal once. The path and the field are untrusted names, escaped in full (backslashes
doubled, see :func:`ggaudit.escaping.escape`); the message is prose that may already quote names with
``repr()`` or ``escape()``, so it is escaped with :func:`ggaudit.escaping.escape_message`, which leaves
backslashes alone and changes nothing twice, yet lets no control, invisible or bidi character through.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import re
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar, Union

from .escaping import escape, escape_message, escape_path
from .io.shell import shell_word

PathLike = Union[str, "os.PathLike[str]"]


class GGAuditError(Exception):
    """Base class of every error ggaudit raises for bad input or an unreadable file."""

    def __init__(self, path: PathLike | None, message: str, *, offset: int | None = None,
                 field: str | None = None) -> None:
        self.path = os.fspath(path) if path is not None else None
        self.message = message
        self.offset = offset
        self.field = field
        super().__init__(self.__str__())

    def __str__(self) -> str:
        parts = []
        if self.path is not None:
            parts.append(escape_path(self.path))
        if self.offset is not None:
            parts.append(f"offset {self.offset}")
        if self.field is not None:
            parts.append(escape(self.field))
        parts.append(escape_message(self.message))
        return ": ".join(parts)

    def __reduce__(self) -> tuple[Any, ...]:  # keep errors picklable across worker processes
        return (_rebuild, (type(self), self.path, self.message, self.offset, self.field))


def _rebuild(cls: type[GGAuditError], path: str | None, message: str, offset: int | None,
             field: str | None) -> GGAuditError:
    return cls(path, message, offset=offset, field=field)


class FormatError(GGAuditError):
    """The file is not a well-formed GGUF (or split set): names the offset and the field."""


class ManifestError(GGAuditError):
    """A manifest, checksum file or model store entry is malformed or unsafe."""


class ReadError(GGAuditError):
    """A read failed, or the file changed (shrank, was replaced) while ggaudit was reading it."""


class UsageError(GGAuditError):
    """The caller asked for something that cannot be done (unknown tensor, bad row IDs, ...)."""


class NothingChecked(UsageError):
    """A check found nothing to check: no file, tensor, row or byte was compared with anything (an empty
    store or snapshot, a manifest naming nothing of the model). Never a clean result: a UsageError (exit 2),
    as a ``rows`` selection of no row is; the message ends "nothing was checked"."""


def check_arg(name: str, value: object, kinds: type | tuple[type, ...], wanted: str) -> None:
    """UsageError naming the argument *name* unless *value* is one of *kinds*: a library call given the wrong
    type of argument says so, instead of failing later with AttributeError or TypeError. A bool is never
    accepted as an int."""
    if not isinstance(value, kinds) or (isinstance(value, bool) and not _accepts_bool(kinds)):
        raise UsageError(None, f"must be {wanted}, not {type(value).__name__}", field=name)


def _accepts_bool(kinds: type | tuple[type, ...]) -> bool:
    return bool in (kinds if isinstance(kinds, tuple) else (kinds,))


def check_count(name: str, value: object, least: int = 0) -> int:
    """*value* as an int of at least *least*, else a UsageError naming the argument *name* (2.5, "3" and
    True are not counts)."""
    check_arg(name, value, int, "an integer")
    assert isinstance(value, int)
    if value < least:
        shown = value if value.bit_length() <= 64 else f"an integer of {value.bit_length()} bits"
        raise UsageError(None, f"must be >= {least}, not {shown}", field=name)
    return value


def one_or_many(name: str, value: object, kinds: tuple[type, ...] = (str,),
                wanted: str = "a string") -> tuple[Any, ...]:
    """*value*, an argument that takes several names, patterns or paths (``tensors=``, ``hashes=``,
    ``models=``), as a tuple of them: one of *kinds* (a str) is one item, never its characters; any other
    iterable gives its items, each one of *kinds*; anything else is a UsageError naming *name*."""
    if isinstance(value, kinds):
        return (value,)
    if isinstance(value, (bytes, bytearray)) or not isinstance(value, Iterable):
        raise UsageError(None, f"must be {wanted} or a collection of them, not {type(value).__name__}", field=name)
    items = tuple(value)
    for item in items:
        if not isinstance(item, kinds):
            raise UsageError(None, f"each item must be {wanted}, not {type(item).__name__}", field=name)
    return items


Opts = TypeVar("Opts")


def options_from(kind: type[Opts], options: Opts | None, keywords: dict[str, Any]) -> Opts:
    """A job's options: *options* (one *kind* object, made elsewhere) or *keywords* (the options written out,
    as the job's keyword arguments), never both; ``kind(**keywords)`` checks each one. A UsageError names
    the keywords given beside an options object, and a keyword that is no option."""
    check_arg("options", options, (kind, type(None)), f"a {kind.__name__} or None")
    if options is not None and keywords:
        raise UsageError(None, f"given with the keywords {', '.join(sorted(keywords))}: give the options in "
                               f"the {kind.__name__} or as keywords, not both", field="options")
    if options is not None:
        return options
    known = {f.name for f in dataclasses.fields(kind)}  # type: ignore[arg-type]
    unknown = sorted(set(keywords) - known)
    if unknown:
        raise UsageError(None, f"is not an option (known: {', '.join(sorted(known))})", field=unknown[0])
    return kind(**keywords)


def caused_by_ctrl_c(err: BaseException) -> bool:
    """Whether ``err`` wraps a KeyboardInterrupt: Python before 3.12 turns one raised while a class body
    is set up (a dataclass being imported, say) into "RuntimeError: Error calling __set_name__"."""
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


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
