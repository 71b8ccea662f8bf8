"""The C library through ctypes, with the prototypes the page-cache and filesystem calls use (POSIX only),
and the OSError of a failed call."""

from __future__ import annotations

import ctypes
import os
from typing import Any

_LIBC: Any = None


def c_library() -> Any:
    """The C library with the prototypes the page-cache calls use (a pointer-sized return for mmap, and
    64-bit offsets, which ctypes' default int would cut)."""
    global _LIBC
    if _LIBC is None:
        lib: Any = ctypes.CDLL(None, use_errno=True)
        vp, sz, i, off = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int64
        map_name = "mmap64" if hasattr(lib, "mmap64") else "mmap"
        lib.ggaudit_mmap = getattr(lib, map_name)
        lib.ggaudit_mmap.restype, lib.ggaudit_mmap.argtypes = vp, [vp, sz, i, i, i, off]
        lib.munmap.restype, lib.munmap.argtypes = i, [vp, sz]
        lib.mincore.restype, lib.mincore.argtypes = i, [vp, sz, vp]
        lib.msync.restype, lib.msync.argtypes = i, [vp, sz, i]
        lib.syscall.restype = ctypes.c_long
        _LIBC = lib
    return _LIBC


def os_error(what: str) -> OSError:
    code = ctypes.get_errno()
    return OSError(code, f"{what}: {os.strerror(code)}")
