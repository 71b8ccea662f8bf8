"""Opening files read-only, on every platform.

POSIX: ``os.open`` with ``O_RDONLY | O_CLOEXEC | O_NONBLOCK`` (so a FIFO cannot hang the open; it changes
nothing for a regular file). Every module that reads a file opens it here (``open_readonly``); the read paths
in :mod:`ggaudit.evidence.readers` that need more of the OS (O_DIRECT, FILE_FLAG_NO_BUFFERING, F_NOCACHE)
still open their descriptors through :func:`open_fd`.
"""

from __future__ import annotations

import os
import stat

from ..errors import ReadError, UsageError

#: Flags every read-only open uses. O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
#: writer forever. O_BINARY: Windows' C runtime would otherwise translate line ends.
READ_FLAGS = (os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
              | getattr(os, "O_NOINHERIT", 0) | getattr(os, "O_NONBLOCK", 0))


def fs_path(path: object) -> str:
    """*path* as text: UsageError for anything but a str or ``os.PathLike[str]`` (bytes included: names are
    reported as text), ReadError for a NUL byte, which no OS accepts in a path."""
    try:
        text = os.fspath(path)  # type: ignore[call-overload]
    except TypeError:
        text = None
    if not isinstance(text, str):
        raise UsageError(None, f"must be a str or os.PathLike[str], not {type(path).__name__}", field="path")
    if "\0" in text:
        raise ReadError(text, "path holds a NUL byte")
    return text


def open_fd(path: str | os.PathLike[str], extra_flags: int = 0) -> int:
    """A read-only descriptor of *path* (``extra_flags`` such as ``O_DIRECT`` added); OSError as raised,
    and the errors of :func:`fs_path` for a path that is not one."""
    return os.open(fs_path(path), READ_FLAGS | extra_flags)


def open_error(path: str | os.PathLike[str], err: OSError) -> ReadError:
    """The one-line error for a failed open, which is also the standard exception of *err*'s errno
    (``FileNotFoundError``, ``PermissionError``, else ``OSError``: see :meth:`ReadError.for_os_error`). Windows
    refuses to open a folder with EACCES: say what it is."""
    if isinstance(err, PermissionError) and os.path.isdir(path):
        return ReadError(path, "is a directory")
    return ReadError.for_os_error(path, f"cannot open: {err.strerror or err}", err)


def require_regular(fd: int, path: str | os.PathLike[str]) -> os.stat_result:
    """The stat of *fd* if it is a regular file; otherwise close it and raise ReadError saying what it is."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise ReadError(path, "is a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file")
    return st


def open_readonly(path: str | os.PathLike[str], extra_flags: int = 0) -> tuple[int, os.stat_result]:
    """Open a regular file read-only; returns (descriptor, its stat). ReadError for anything else."""
    try:
        fd = open_fd(path, extra_flags)
    except OSError as err:
        raise open_error(path, err) from None
    return fd, require_regular(fd, path)

