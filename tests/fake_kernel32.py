"""A stand-in for Windows' kernel32 that runs on Linux and enforces the FILE_FLAG_NO_BUFFERING contract.

The only fake in the suite. It serves real files through real memory, and fails exactly where Windows
fails: on a no-buffering handle, a ReadFile whose file offset, length or buffer address is not a
multiple of the volume sector size fails with ERROR_INVALID_PARAMETER (87). At the end of the file
a synchronous ReadFile with an OVERLAPPED offset returns FALSE / ERROR_HANDLE_EOF (38) when the offset
is at or past the end (``eof="error"``), or TRUE with zero bytes (``eof="zero"``, the answer for
reads without an offset); a read that crosses the end delivers the bytes up to it and succeeds.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import threading
from dataclasses import dataclass, field

ERROR_INVALID_HANDLE = 6
ERROR_HANDLE_EOF = 38
ERROR_INVALID_PARAMETER = 87
FILE_FLAG_NO_BUFFERING = 0x20000000
GENERIC_READ = 0x80000000
INVALID_HANDLE_VALUE = ctypes.c_void_p(-1).value


@dataclass
class _Handle:
    fd: int
    flags: int
    access: int


@dataclass
class FakeKernel32:
    """kernel32 as WindowsDirectReader uses it; *sector* is the volume's logical sector size."""

    sector: int = 512
    physical_sector: int | None = None
    eof: str = "error"
    storage_info_fails: bool = False
    last_error: int = 0
    handles: dict[int, _Handle] = field(default_factory=dict)
    allocations: dict[int, mmap.mmap] = field(default_factory=dict)
    reads: list[tuple[int, int]] = field(default_factory=list)
    _next: int = 0x100
    _seek_lock: threading.Lock = field(default_factory=threading.Lock)

    def GetLastError(self) -> int:
        return self.last_error

    def _fail(self, code: int) -> int:
        self.last_error = code
        return 0

    def CreateFileW(self, path: str, access: int, share: int, security: object, disposition: int,
                    flags: int, template: object) -> int:
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        except OSError:
            self.last_error = 2  # ERROR_FILE_NOT_FOUND
            return INVALID_HANDLE_VALUE
        self._next += 4
        self.handles[self._next] = _Handle(fd, flags, access)
        return self._next

    def GetFileSizeEx(self, handle: int, size_ptr: object) -> int:
        h = self.handles.get(handle)
        if h is None:
            return self._fail(ERROR_INVALID_HANDLE)
        size_ptr.contents.value = os.fstat(h.fd).st_size  # type: ignore[attr-defined]
        return 1

    def GetFileInformationByHandleEx(self, handle: int, info_class: int, info_ptr: object, size: int) -> int:
        if handle not in self.handles or info_class != 16 or self.storage_info_fails:
            return self._fail(ERROR_INVALID_PARAMETER)
        info = info_ptr.contents  # type: ignore[attr-defined]
        info.LogicalBytesPerSector = self.sector
        info.PhysicalBytesPerSectorForAtomicity = self.physical_sector or self.sector
        info.PhysicalBytesPerSectorForPerformance = self.physical_sector or self.sector
        info.FileSystemEffectivePhysicalBytesPerSectorForAtomicity = self.physical_sector or self.sector
        return 1

    def VirtualAlloc(self, address: object, size: int, alloc_type: int, protect: int) -> int:
        block = mmap.mmap(-1, size)  # page-aligned, as VirtualAlloc's memory is
        addr = ctypes.addressof(ctypes.c_char.from_buffer(block))
        self.allocations[addr] = block
        return addr

    def VirtualFree(self, address: int, size: int, free_type: int) -> int:
        block = self.allocations.pop(address, None)
        if block is None:
            return self._fail(ERROR_INVALID_PARAMETER)
        with contextlib.suppress(BufferError):  # a view of it is still alive in the caller; freed with the view
            block.close()
        return 1

    def ReadFile(self, handle: int, buffer: int, length: int, read_ptr: object, overlapped_ptr: object) -> int:
        h = self.handles.get(handle)
        if h is None:
            return self._fail(ERROR_INVALID_HANDLE)
        ov = overlapped_ptr.contents  # type: ignore[attr-defined]
        offset = ov.Offset | (ov.OffsetHigh << 32)
        read_ptr.contents.value = 0  # type: ignore[attr-defined]
        if h.flags & FILE_FLAG_NO_BUFFERING and (offset % self.sector or length % self.sector
                                                  or buffer % self.sector):
            return self._fail(ERROR_INVALID_PARAMETER)
        size = os.fstat(h.fd).st_size
        if offset >= size:
            return 1 if self.eof == "zero" else self._fail(ERROR_HANDLE_EOF)
        with self._seek_lock:   # seek + read, not pread: the stand-in runs on Windows too, which has none
            os.lseek(h.fd, offset, os.SEEK_SET)
            data = os.read(h.fd, length)
        ctypes.memmove(buffer, data, len(data))
        read_ptr.contents.value = len(data)  # type: ignore[attr-defined]
        self.reads.append((offset, length))
        return 1

    def CloseHandle(self, handle: int) -> int:
        h = self.handles.pop(handle, None)
        if h is None:
            return self._fail(ERROR_INVALID_HANDLE)
        os.close(h.fd)
        return 1
