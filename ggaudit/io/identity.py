"""Whether a file is still the one that was opened: :class:`FileIdentity`, checked before reporting what
was read from it."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import ReadError
from .system import WINDOWS


@dataclass(frozen=True)
class FileIdentity:
    """What tells us a file was replaced, resized or rewritten between opening and reading it.

    ``ctime_ns`` (the inode's change time) moves on every write and every change of the inode, and no
    system call can put it back, so a same-size rewrite whose mtime was restored (``os.utime``) is still
    seen. On Windows ``st_ctime`` is the file's creation time (deprecated from Python 3.12), which setting
    the times can change too (seen under Wine), so there it is 0: the identity stays right, it only cannot
    see a rewrite whose size and mtime were kept.
    """

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileIdentity:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, 0 if WINDOWS else st.st_ctime_ns)

    @classmethod
    def now(cls, path: str | os.PathLike[str], when: str) -> FileIdentity:
        """The identity of *path* now; a file gone since is a ReadError "file changed *when*"."""
        try:
            return cls.of(os.stat(path))
        except OSError as err:
            raise ReadError.for_os_error(path, f"file changed {when}: {err.strerror}", err) from None

    def same_file(self, st: os.stat_result) -> bool:
        return (st.st_dev, st.st_ino) == (self.device, self.inode)

    def changes(self, now: FileIdentity) -> list[str]:
        """What differs from *now*, in words ("size 10 -> 12", "ctime A -> B"); empty for the same identity."""
        return [f"{name} {old} -> {new}" for name, old, new in (
            ("device", self.device, now.device), ("inode", self.inode, now.inode), ("size", self.size, now.size),
            ("mtime", self.mtime_ns, now.mtime_ns), ("ctime", self.ctime_ns, now.ctime_ns)) if old != new]

    def check(self, path: str | os.PathLike[str], when: str) -> None:
        """Raise ReadError if *path* is no longer this file: an answer about bytes that are no longer
        there would be silently wrong, so callers check before reporting what they read. The message names
        what changed (device or inode: replaced; size; mtime; ctime)."""
        now = FileIdentity.now(path, when)
        if now != self:
            raise ReadError(path, f"file changed {when} (replaced, resized or rewritten: "
                            f"{', '.join(self.changes(now))})")
