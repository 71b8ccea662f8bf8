"""The exception hierarchy: every error ggaudit raises on bad input is a GGAuditError.

Each error renders as one line naming the file, and where it is known the byte offset and the field,
so the CLI can print ``str(err)`` and exit 2 without a traceback.
"""

from __future__ import annotations

import os
from typing import Union

from .text import escape, escape_path

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
        parts.append(self.message)
        return ": ".join(parts)

    def __reduce__(self):  # keep errors picklable across worker processes
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
