"""Writing an output file (a manifest of either format, the command line's report, ``-o FILE``): atomically,
never over an input, never over anything but a regular file, and flushed to disk with its folder."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterable

from ..errors import UsageError, one_or_many
from .system import WINDOWS

#: Flags of the temporary file: created here or not at all (O_EXCL never follows a planted link),
#: binary so Windows' C runtime writes the text exactly.
#: An output named ``-`` is stdout (``-o -``), never a file called "-".
STDOUT = "-"

_TMP_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
              | getattr(os, "O_NOINHERIT", 0))


def write_output_file(text: str, path: str | os.PathLike[str], *, replace: bool = False,
                      inputs: Iterable[str | os.PathLike[str]] = (), what: str = "the manifest") -> None:
    """Write an output's text (UTF-8, ``\\n`` line ends on every OS) atomically: a temporary file in the same
    folder, flushed to disk, then renamed over ``path``. An existing ``path`` is refused unless ``replace``,
    and is never one of ``inputs`` (however they are named) nor anything but a file (:func:`check_output`);
    ``what`` it is names it in errors."""
    target = os.fspath(path)
    inputs = one_or_many("inputs", inputs, (str, os.PathLike), "a path")    # checked twice: not a used-up iterator
    check_output(target, replace=replace, inputs=inputs, what=what)
    tmp = _create_tmp(target, what)
    try:
        with open(tmp[0], "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        check_output(target, replace=replace, inputs=inputs, what=what)   # nothing took the name meanwhile
        os.replace(tmp[1], target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp[1])
        raise
    sync_folder(os.path.dirname(os.path.abspath(target)))


def check_output(path: str, *, replace: bool, inputs: Iterable[str | os.PathLike[str]] = (),
                 replace_with: str = "replace=True", what: str = "the manifest") -> None:
    """UsageError unless ``path`` may be written: absent, or (with ``replace``) a regular file that is
    none of ``inputs``. Files are compared by identity (device and inode), not by name, so a second
    path to the same file (a link, ``./``, another case on Windows) is caught too. ``replace_with`` is
    how the caller asks for a replacement (the CLI's ``--force``), for the message."""
    # One path is one input: compared letter by letter, the model itself would not be protected.
    sources = one_or_many("inputs", inputs, (str, os.PathLike), "a path")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as err:
        raise UsageError(path, f"cannot write {what} here: {err.strerror or err}") from None
    for source in sources:
        with contextlib.suppress(OSError):
            if os.path.samestat(st, os.stat(source)):
                raise UsageError(path, f"is an input of this run ({os.path.basename(os.fspath(source))}); "
                                 "an output never replaces an input")
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(path, "exists and is not a regular file; not replaced")
    if not replace:
        raise UsageError(path, f"exists; give {replace_with} to replace it")


def _create_tmp(target: str, what: str) -> tuple[int, str]:
    """A new, empty temporary file in the output's folder: (descriptor, path)."""
    folder, name = os.path.split(target)
    for _ in range(16):
        tmp = os.path.join(folder, f".{name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, _TMP_FLAGS, 0o666), tmp
        except FileExistsError:
            continue
        except OSError as err:
            raise UsageError(target, f"cannot write {what}: {err.strerror or err}") from None
    raise UsageError(target, "cannot create a temporary file next to it")


def sync_folder(path: str | os.PathLike[str]) -> None:
    """Flush a folder's entries to disk, so a file just renamed into it survives a power cut (POSIX: fsync
    of the folder). Windows has no such call, and NTFS journals the rename itself; a filesystem that
    refuses it (some network mounts) only loses that durability."""
    if WINDOWS:
        return
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
