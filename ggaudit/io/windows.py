"""Windows' kernel32 through ctypes: the prototypes ggaudit calls, and the ``OVERLAPPED`` that puts a
synchronous ``ReadFile`` at an offset (:mod:`ggaudit.io.positioned`, and the no-buffering read path of
:mod:`ggaudit.evidence.readers`)."""

from __future__ import annotations

import ctypes
from typing import Any

ERROR_HANDLE_EOF = 38


class OVERLAPPED(ctypes.Structure):
    _fields_ = [("Internal", ctypes.c_size_t), ("InternalHigh", ctypes.c_size_t),
                ("Offset", ctypes.c_uint32), ("OffsetHigh", ctypes.c_uint32), ("hEvent", ctypes.c_void_p)]


def overlapped_at(offset: int) -> OVERLAPPED:
    """An OVERLAPPED that positions a synchronous ReadFile at *offset*."""
    ov = OVERLAPPED()
    ov.Offset, ov.OffsetHigh = offset & 0xFFFFFFFF, offset >> 32
    return ov


_KERNEL32: Any = None


def kernel32() -> Any:
    """kernel32 with the prototypes ggaudit uses, and GetLastError from ctypes' saved copy (Windows only)."""
    global _KERNEL32
    if _KERNEL32 is None:
        lib = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
        vp, u32, p = ctypes.c_void_p, ctypes.c_uint32, ctypes.POINTER
        protos = {
            "CreateFileW": (vp, [ctypes.c_wchar_p, u32, u32, vp, u32, u32, vp]),
            "GetFileSizeEx": (ctypes.c_int, [vp, p(ctypes.c_int64)]),
            "GetFileInformationByHandleEx": (ctypes.c_int, [vp, ctypes.c_int, vp, u32]),
            "VirtualAlloc": (vp, [vp, ctypes.c_size_t, u32, u32]),
            "VirtualFree": (ctypes.c_int, [vp, ctypes.c_size_t, u32]),
            "ReadFile": (ctypes.c_int, [vp, vp, u32, p(u32), p(OVERLAPPED)]),
            "CloseHandle": (ctypes.c_int, [vp]),
        }
        for name, (res, args) in protos.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        lib.GetLastError = ctypes.get_last_error  # type: ignore[attr-defined]
        _KERNEL32 = lib
    return _KERNEL32
