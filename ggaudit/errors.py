"""The exception hierarchy: every error ggaudit raises on bad input is a GGAuditError.

Each error renders as one line naming the file, and where it is known the byte offset and the field,
so the CLI can print ``str(err)`` and exit 2 without a traceback.

Escaping, one rule: ``path``, ``field`` and ``message`` hold text as it is, and ``str(err)`` makes each part
safe for a terminal once. The path and the field are untrusted names, escaped in full (backslashes
doubled, see :func:`ggaudit.escaping.escape`); the message is prose that may already quote names with
``repr()`` or ``escape()``, so it is escaped with :func:`ggaudit.escaping.escape_message`, which leaves
backslashes alone and changes nothing twice, yet lets no control, invisible or bidi character through.

An error the OS gave (a missing file, a refused permission, EIO) is made by :meth:`GGAuditError.for_os_error`:
ggaudit's error (``ReadError``, ``ManifestError``) that is also the standard exception of its errno, so Python
code catches it as it catches its own (``except FileNotFoundError``, ``err.errno``). A message that names a
parameter of the library says it as a :class:`Param` (``manifest=``); the command line says its option instead
(``--manifest``: ``ggaudit.cli.common.as_flags``).
"""

from __future__ import annotations

import copy
import dataclasses
import errno
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, Union, cast

from .escaping import escape, escape_message, escape_path

PathLike = Union[str, "os.PathLike[str]"]


@dataclasses.dataclass(frozen=True)
class Param:
    """A parameter of the library that an error's message names (``give manifest= or sums=``): the library says
    it as ``name=`` (with *value*, ``name=value``), the command line as the option that sets it (its one table,
    ``ggaudit.cli.common.FLAGS``), so neither speaks the other's language."""

    name: str
    value: str = ""

    def __str__(self) -> str:
        return f"{self.name}={self.value}"


#: An error's message as given: text, or text and the parameters it names (see :class:`Param`).
Words = str | tuple[str | Param, ...]

#: The standard exception an OS error of each errno is also raised as (Windows' errors arrive mapped to errno by
#: Python: ERROR_FILE_NOT_FOUND and ERROR_PATH_NOT_FOUND to ENOENT, ERROR_ACCESS_DENIED and
#: ERROR_SHARING_VIOLATION to EACCES); any other errno is a plain OSError.
STANDARD_OS_ERRORS: dict[int, type[OSError]] = {
    errno.ENOENT: FileNotFoundError, errno.EACCES: PermissionError, errno.EPERM: PermissionError}

E = TypeVar("E", bound="GGAuditError")


class GGAuditError(Exception):
    """Base class of every error ggaudit raises for bad input or an unreadable file."""

    def __init__(self, path: PathLike | None, message: Words, *, offset: int | None = None,
                 field: str | None = None) -> None:
        self.path = os.fspath(path) if path is not None else None
        self.words = (message,) if isinstance(message, str) else message
        self.message = self.worded(str)
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

    def worded(self, param: Callable[[Param], str]) -> str:
        """The message with each parameter it names said by *param* (``str``: the library's ``name=``)."""
        return "".join(param(word) if isinstance(word, Param) else word for word in self.words)

    def said_as(self: E, param: Callable[[Param], str], field: str | None) -> E:
        """A copy of this error (of its class, OS error included) with the parameters named as *param* says
        them and *field* in place of its own: how the command line names its options instead."""
        said = copy.copy(self)
        said.words, said.message, said.field = (said.worded(param),), said.worded(param), field
        said.args = (str(said),)
        return said

    def __reduce__(self) -> tuple[Any, ...]:  # keep errors picklable across worker processes
        return (_rebuild, (type(self), self.path, self.words, self.offset, self.field))

    @classmethod
    def for_os_error(cls: type[E], path: PathLike | None, message: Words, err: OSError, *,
                     offset: int | None = None, field: str | None = None) -> E:
        """This error, for *err* from the OS, that is also the standard exception of its errno
        (:data:`STANDARD_OS_ERRORS`: ``except FileNotFoundError``, ``except OSError`` catch it), with *err*'s
        ``errno``, ``strerror`` and ``filename`` (else *path*); ``str()`` stays this error's one line."""
        made = _also_standard(cls, STANDARD_OS_ERRORS.get(err.errno or 0, OSError))(
            path, message, offset=offset, field=field)
        standard = cast(OSError, made)
        standard.errno, standard.strerror = err.errno, err.strerror
        standard.filename = err.filename if err.filename is not None else made.path
        if sys.platform == "win32":     # Windows' own code too, which Python mapped to that errno
            standard.winerror = err.winerror
        return made


def _rebuild(cls: type[GGAuditError], path: str | None, message: Words, offset: int | None,
             field: str | None) -> GGAuditError:
    return cls(path, message, offset=offset, field=field)


def _reduce_os_error(self: Any) -> tuple[Any, ...]:
    """How an error made by :meth:`GGAuditError.for_os_error` pickles: as its ggaudit class (its first base; the
    class itself is made at run time, importable by no name) and its errno, made again on the other side."""
    return (_rebuild_os_error, (type(self).__bases__[0], self.path, self.words, self.offset, self.field,
                                self.errno, self.strerror, self.filename, getattr(self, "winerror", None)))


def _rebuild_os_error(cls: type[GGAuditError], path: str | None, message: Words, offset: int | None,
                      field: str | None, code: int | None, strerror: str | None, filename: Any,
                      winerror: int | None = None) -> GGAuditError:
    return cls.for_os_error(path, message, OSError(code, strerror, filename, winerror), offset=offset, field=field)


#: Each class :func:`_also_standard` made, by its two bases: made once, so every missing file's ReadError is of
#: the one class ``ReadError[FileNotFoundError]``.
_COMBINED: dict[tuple[type, type], type] = {}


def _also_standard(cls: type[E], standard: type[OSError]) -> type[E]:
    """*cls* that is also *standard* (``ReadError`` and ``FileNotFoundError``): made once per pair (two threads
    making it at once keep the first one stored)."""
    made = _COMBINED.get((cls, standard))
    if made is None:
        made = _COMBINED.setdefault((cls, standard), type(f"{cls.__name__}[{standard.__name__}]", (cls, standard), {
            "__module__": cls.__module__, "__reduce__": _reduce_os_error,
            "__doc__": f"A {cls.__name__} that is also a {standard.__name__}, the OS error it was made for."}))
    return cast("type[E]", made)


class FormatError(GGAuditError):
    """The file is not a well-formed GGUF (or split set): names the offset and the field."""


class ManifestError(GGAuditError):
    """A manifest, checksum file or model store entry is malformed, unsafe or cannot be read (one the OS refused is
    also the standard exception of that error: :meth:`GGAuditError.for_os_error`)."""


class ReadError(GGAuditError):
    """A file cannot be opened, a read failed, or the file changed (shrank, was replaced) while ggaudit was reading
    it. One the OS refused (missing, not permitted, EIO) is also the standard exception of that error
    (``FileNotFoundError``, ``PermissionError``, else ``OSError``: :meth:`GGAuditError.for_os_error`)."""


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


def options_from(kind: type[Opts], options: Opts | None, keywords: Mapping[str, Any]) -> Opts:
    """A job's options: *options* (one *kind* object, made elsewhere) or *keywords* (the options written out,
    as the job's keyword arguments), never both; ``kind(**keywords)`` checks each one. A keyword that holds its
    field's default itself (the job's parameter left alone) is not given. A UsageError names the keywords given
    beside an options object. The keywords are the fields' (:func:`option_keywords`): a misspelled one is the
    job's TypeError, as Python raises it for any function."""
    check_arg("options", options, (kind, type(None)), f"a {kind.__name__} or None")
    defaults = {f.name: f.default for f in dataclasses.fields(kind)}  # type: ignore[arg-type]
    # Identity, not equality: an equal value given beside options is still given, and refused.
    given = {name: value for name, value in keywords.items() if value is not defaults[name]}
    if options is not None and given:
        raise UsageError(None, f"given with the keywords {', '.join(sorted(given))}: give the options in "
                               f"the {kind.__name__} or as keywords, not both", field="options")
    if options is not None:
        return options
    return kind(**given)


def option_keywords(kind: type, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The options of *kind* among a job's *parameters* (its ``locals()`` as it starts): its keyword parameters
    are the fields of its options (tests/test_api.py holds them equal), for :func:`options_from`."""
    return {f.name: parameters[f.name] for f in dataclasses.fields(kind)}


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
