"""Reads at an offset, per OS: ``pread``, ``pread_into``, ``pread_exact``.

POSIX: ``os.pread``/``os.preadv``. Windows CPython has neither: there a read is ``ReadFile`` on the
descriptor's handle with the offset in an ``OVERLAPPED``, so threads sharing one descriptor never race on a
file pointer, and ``ERROR_HANDLE_EOF`` (38) is the end of the file. kernel32 is looked up in
:mod:`ggaudit.io.windows` at each call, so a test can stand in for it there.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

from ..errors import ReadError
from . import windows
from .system import WINDOWS

#: Largest single Windows request: ReadFile counts bytes in a DWORD. Linux caps one read a little
#: under 2 GiB too, so callers already loop (pread_exact) or treat the count as one request's answer.
_MAX_REQUEST = 1 << 30


def address_of(view: memoryview) -> int:
    """The memory address of a writable buffer (to hand to the OS, or to check its alignment)."""
    anchor = ctypes.c_char.from_buffer(view)
    try:
        return ctypes.addressof(anchor)
    finally:
        del anchor


def _win_read(fd: int, address: int, length: int, offset: int) -> int:
    import msvcrt
    k = windows.kernel32()
    got = ctypes.c_uint32(0)
    ov = windows.overlapped_at(offset)
    handle = msvcrt.get_osfhandle(fd)  # type: ignore[attr-defined]
    if k.ReadFile(handle, address, min(length, _MAX_REQUEST), ctypes.byref(got), ctypes.byref(ov)):
        return got.value
    code = k.GetLastError()
    if code == windows.ERROR_HANDLE_EOF:
        return 0
    raise ctypes.WinError(code)  # type: ignore[attr-defined]


def _win_pread_into(fd: int, view: memoryview, offset: int) -> int:
    if not len(view):
        return 0
    return _win_read(fd, address_of(view), len(view), offset)


def _win_pread(fd: int, length: int, offset: int) -> bytes:
    if length <= 0:
        return b""
    buf = ctypes.create_string_buffer(min(length, _MAX_REQUEST))
    got = _win_read(fd, ctypes.addressof(buf), len(buf), offset)
    return buf.raw if got == len(buf) else ctypes.string_at(buf, got)


def _posix_pread(fd: int, length: int, offset: int) -> bytes:
    return os.pread(fd, length, offset)


def _posix_pread_into(fd: int, view: memoryview, offset: int) -> int:
    return os.preadv(fd, [view], offset)


#: ``pread(fd, length, offset)``: up to *length* bytes at *offset* in one request, b"" at the end of the file.
#: ``pread_into(fd, view, offset)``: one request into *view*; how many bytes arrived (0 at the end).
#: Bound once here rather than dispatched per call: the row gather makes millions of these calls.
pread: Callable[[int, int, int], bytes]
pread_into: Callable[[int, memoryview, int], int]
if WINDOWS:
    pread, pread_into = _win_pread, _win_pread_into
else:
    pread, pread_into = _posix_pread, _posix_pread_into


def pread_exact(fd: int, path: str | os.PathLike[str], view: memoryview, offset: int) -> None:
    """Fill ``view`` with the bytes at ``offset``; ReadError naming the offset if the file ends first
    (it shrank or was replaced under us) or a read fails."""
    got = 0
    while got < len(view):
        part = view[got:]
        try:
            n = pread_into(fd, part, offset + got)
        except OSError as err:
            raise ReadError.for_os_error(path, f"read failed: {err.strerror or err}", err,
                                         offset=offset + got) from err
        finally:
            part.release()
        if n == 0:
            raise ReadError(path, f"file ended early: expected at least {offset + len(view)} bytes, "
                            "it shrank or was replaced while being read", offset=offset + got)
        got += n

