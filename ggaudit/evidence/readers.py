"""Read paths: buffered (the reference), mmap, and direct I/O (Linux O_DIRECT, Windows NO_BUFFERING, macOS F_NOCACHE).

Every reader answers the same three questions: which span must be read to cover some bytes
(:meth:`Reader.span`), which buffer may be read into (:meth:`Reader.alloc`), and how many bytes one read
delivered (:meth:`Reader.read_into`). Readers never retry or hide a short read: the caller decides
whether it is a finding (it is, unless it stopped at the end of the file; see :func:`is_short`).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import mmap
import os
import platform
import struct
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from ..io import opening, positioned, windows
from ..errors import ReadError, UsageError
from ..io.advice import advise
from ..io.positioned import address_of
from .paths import PATHS

log = logging.getLogger(__name__)

#: Every buffer is filled with this byte before each read, so bytes a read did not deliver show up.
POISON = 0xA5
#: Poisoning this many bytes or more is a memset; fewer, a copy from a poison block, which is quicker for a row's
#: read (0.12 against 0.41 us for 4 KiB: the ctypes call costs more than the copy) and slower for a sweep's
#: chunk (39 against 22 us for 2 MiB, and it holds the GIL).
MEMSET_FROM = 128 << 10
PAGE = 4096
SECTOR = 512
WINDOW_64K = 65536
#: Whether a file can be truncated while mapped (everywhere but Windows, which refuses it).
MAPPED_FILES_CAN_SHRINK = sys.platform != "win32"
#: Used when the kernel cannot tell us the direct-I/O alignment: safe on every device we know of.
FALLBACK_DIO_ALIGN = 4096


def align_down(n: int, a: int) -> int:
    return n - n % a


def align_up(n: int, a: int) -> int:
    return -(-n // a) * a


def is_short(offset: int, requested: int, got: int, file_size: int) -> bool:
    """True when a read returned fewer bytes than asked and did not stop at the end of the file."""
    return got < requested and offset + got < file_size


@dataclass(frozen=True)
class Alignment:
    """What a read path demands: file offsets and lengths in multiples of *offset*, buffers at *memory*."""

    offset: int
    memory: int
    source: str  # where the numbers came from: "none", "statx", "probe", "fallback", "sector-size"


NO_ALIGNMENT = Alignment(1, 1, "none")


class FailedRead(ReadError):
    """One read of a read path failed with an error from below (EIO, EAGAIN, a copy out of a mapping that
    faulted): a finding for that path, which the other paths outlive. *errno* is None where the OS gives
    no errno (Windows' ReadFile). A file that shrank or ends early is a plain ReadError: it changed."""

    def __init__(self, path: str | None, message: str, *, offset: int | None = None, field: str | None = None,
                 mode: str = "", length: int = 0, errno: int | None = None) -> None:
        super().__init__(path, message, offset=offset, field=field)
        self.mode, self.length, self.errno = mode, length, errno


#: Takes a read that failed with an error from below: the reads made after a replay report theirs so.
ReadFailed = Callable[[FailedRead], None]


class DirectIOUnavailable(ReadError):
    """Direct I/O cannot be used on this file's filesystem (or platform); the caller says so and goes on."""


class _IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_VM_READ: Any = None
#: This process's ID for process_vm_readv, kept current across fork without a getpid per read.
_PID = [os.getpid()]
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _PID.__setitem__(0, os.getpid()))


def vm_read() -> Any:
    """libc's process_vm_readv where this process may use it on itself, else None.

    Copying out of a file mapping with it instead of a CPU load turns a page past the end of a file
    that shrank into a short count (EFAULT), where a load raises SIGBUS and kills the process. Linux
    3.2+; some sandboxes (seccomp profiles) refuse it, which the probe finds out once.
    """
    global _VM_READ
    if _VM_READ is None:
        _VM_READ = False
        fn = getattr(ctypes.CDLL(None, use_errno=True), "process_vm_readv", None) \
            if sys.platform.startswith("linux") else None
        if fn is not None:
            fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
                           ctypes.c_ulong]
            fn.restype = ctypes.c_ssize_t
            src, dst = ctypes.create_string_buffer(b"x", 1), ctypes.create_string_buffer(1)
            local, remote = _IOVec(ctypes.addressof(dst), 1), _IOVec(ctypes.addressof(src), 1)
            if fn(os.getpid(), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) == 1 and dst.raw == b"x":
                _VM_READ = fn
    return _VM_READ or None


class Buffer:
    """A writable buffer a reader may read into; page-aligned (mmap) unless a platform allocator is used."""

    def __init__(self, size: int, view: memoryview | None = None,
                 release: Callable[[], None] | None = None) -> None:
        self.size = size
        if view is None:
            self._map: mmap.mmap | None = mmap.mmap(-1, max(size, 1))
            view = memoryview(self._map)[:size]
        else:
            self._map = None
        self.view = view
        self._release = release
        self._poison = _poison_bytes(min(size, MEMSET_FROM))
        self._start: int | None = None    # the address memset poisons at: a buffer never moves

    @property
    def address(self) -> int:
        return address_of(self.view) if self.size else 0

    def poison(self, n: int) -> None:
        if n < MEMSET_FROM:
            self.view[:n] = self._poison[:n]
            return
        # memset, as a read pass poisons (ggaudit.evidence.read_pass): it only writes, and ctypes releases the
        # GIL meanwhile, where the copy holds it and reads as many bytes as it writes.
        if n > self.size:      # never write past the buffer (the copy above refuses it too)
            raise ValueError(f"cannot poison {n} bytes of a {self.size}-byte buffer")
        if self._start is None:
            self._start = self.address
        ctypes.memset(self._start, POISON, n)

    def close(self) -> None:
        self.view.release()
        if self._map is not None:
            # A slice of it may still be alive somewhere: it is unmapped with that slice.
            with contextlib.suppress(BufferError):
                self._map.close()
        if self._release is not None:
            self._release()


_MEMCMP: Any = None


def _memcmp() -> Any:
    global _MEMCMP
    if _MEMCMP is None:
        libc = ctypes.cdll.msvcrt if sys.platform == "win32" else ctypes.CDLL(None)
        fn = libc.memcmp
        fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t], ctypes.c_int
        _MEMCMP = fn
    return _MEMCMP


def same_bytes(a: memoryview, b: memoryview) -> bool:
    """Byte equality of two writable buffers without copying them (libc memcmp, GIL released)."""
    if len(a) != len(b):
        return False
    if len(a) < 4096:
        return bytes(a) == bytes(b)
    return bool(_memcmp()(address_of(a), address_of(b), len(a)) == 0)


_POISON_CACHE: dict[int, memoryview] = {}


def _poison_bytes(n: int) -> memoryview:
    size = 1 << max(12, (n - 1).bit_length())
    block = _POISON_CACHE.get(size)
    if block is None:
        block = _POISON_CACHE[size] = memoryview(bytes([POISON]) * size)
    return block[:n]


def _open_fd(path: str, extra_flags: int = 0) -> tuple[int, int]:
    try:
        fd = opening.open_fd(path, extra_flags)
    except OSError as err:
        if extra_flags and err.errno == errno.EINVAL:
            raise DirectIOUnavailable(path, "the filesystem refuses direct I/O (open with O_DIRECT: "
                                            "EINVAL)") from None
        raise opening.open_error(path, err) from None
    return fd, opening.require_regular(fd, path).st_size


_R = TypeVar("_R", bound="Reader")


class Reader:
    """One read path over one file, opened read-only. Subclasses set *mode* and implement read_into."""

    mode = "buffered"
    alignment = NO_ALIGNMENT
    #: Bytes at offset 0 this path read once when it was opened (the direct path's alignment probe): a
    #: row holding them got a previous request's buffer.
    probed = 0

    def __init__(self, path: str, size: int) -> None:
        self.path = path
        self.size = size

    def span(self, offset: int, length: int) -> tuple[int, int]:
        """The (start, length) this path must read to cover [offset, offset + length)."""
        a = self.alignment.offset
        start = offset - offset % a  # align_down and align_up, inline: this runs once per gathered read
        return start, -(-(offset + length) // a) * a - start

    def alloc(self, size: int) -> Buffer:
        # mmap'd memory is page-aligned, which satisfies every dio_mem_align Linux reports.
        return Buffer(align_up(max(size, 1), self.alignment.offset))

    def read_into(self, view: memoryview, offset: int) -> int:
        """Read len(view) bytes at *offset* into *view* with one request; return how many arrived."""
        raise NotImplementedError

    def done_with(self, offset: int, length: int) -> None:
        """[offset, offset + length) has been read and will not be read again: a path that keeps the file's
        pages in this process (a mapping) may let them go. Only a hint; the other paths keep nothing."""

    def close(self) -> None:
        """Release the file."""

    def __enter__(self: _R) -> _R:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _failed(self, err: OSError, offset: int, length: int) -> FailedRead:
        return FailedRead(self.path, f"{self.mode} read of {length} bytes failed: {err.strerror or err}",
                          offset=offset, mode=self.mode, length=length, errno=err.errno)


class BufferedReader(Reader):
    """Plain positioned reads through the page cache (``pread``; ``ReadFile`` at an offset on Windows),
    one request per call."""

    mode = "buffered"

    def __init__(self, path: str, extra_flags: int = 0) -> None:
        fd, size = _open_fd(path, extra_flags)
        super().__init__(path, size)
        self.fd = fd

    def read_into(self, view: memoryview, offset: int) -> int:
        try:
            return positioned.pread_into(self.fd, view, offset)
        except OSError as err:
            raise self._failed(err, offset, len(view)) from err

    def read_exact(self, offset: int, length: int) -> bytes:
        """The reference read: loop over short reads; a file that ends early is a ReadError."""
        try:
            data = positioned.pread(self.fd, length, offset)
        except OSError as err:
            raise self._failed(err, offset, length) from err
        if len(data) == length:
            return data  # the usual case: one read, no copy
        # Short (a signal, a network filesystem, the end of the file): redo it with read_exact_into's loop,
        # which finishes the read or names where the file ends.
        buf = bytearray(length)
        with memoryview(buf) as view:
            self.read_exact_into(view, offset)
        return bytes(buf)

    def read_or_report(self, offset: int, length: int, failed: ReadFailed | None) -> bytes | None:
        """read_exact, or None when the read fails with an error from below and *failed* takes it (the reads
        made after a replay: a finding of theirs, the work going on); with *failed* None it raises."""
        try:
            return self.read_exact(offset, length)
        except FailedRead as err:
            if failed is None:
                raise
            failed(err)
            return None

    def will_need(self, offset: int, length: int) -> None:
        """Ask the kernel to start reading [offset, offset + length) into the page cache in the background,
        where it can (Linux, BSD): a later read of the range then overlaps whatever ran meanwhile."""
        advise(self.fd, offset, length, "willneed")

    def read_exact_into(self, view: memoryview, offset: int) -> None:
        """read_exact into a caller's buffer (no allocation): loops over short reads, ReadError at EOF."""
        done = 0
        while done < len(view):
            part = view[done:]
            try:
                n = positioned.pread_into(self.fd, part, offset + done)
            except OSError as err:
                raise self._failed(err, offset + done, len(part)) from err
            finally:
                part.release()
            if n == 0:
                raise ReadError(self.path, f"file ends before {len(view)} bytes could be read (it is "
                                           f"{os.fstat(self.fd).st_size} bytes; changed while reading?)",
                                offset=offset + done)
            done += n

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def map_view(fd: int, offset: int, length: int,
             granularity: int = mmap.ALLOCATIONGRANULARITY) -> tuple[mmap.mmap, int]:
    """Map a read-only view covering [offset, offset + length); returns (map, where offset lies in it).

    A view must start at a multiple of the allocation granularity (the page size on Linux, 64 KiB on
    Windows), so the view starts below *offset* and the caller slices from the returned delta.
    """
    start = align_down(offset, granularity)
    return mmap.mmap(fd, offset + length - start, access=mmap.ACCESS_READ, offset=start), offset - start


class MmapReader(Reader):
    """The whole file mapped read-only, as an engine maps a model; a read is a copy out of the map."""

    mode = "mmap"

    def __init__(self, path: str) -> None:
        fd, size = _open_fd(path)
        super().__init__(path, size)
        self.fd = fd
        self._map: mmap.mmap | None = None
        self._bytes: memoryview | None = None  # slices of it copy straight out of the map, once
        if size:
            try:
                self._map, _ = map_view(fd, 0, size)
            except (OSError, ValueError) as err:
                os.close(fd)
                raise ReadError(path, f"cannot map the file: {err}") from None
            self._bytes = memoryview(self._map)
            # Where the mapping starts (it never moves while open), for process_vm_readv.
            self._base: int = np.frombuffer(self._map, np.uint8, count=1).ctypes.data
        self._vm_read = vm_read()
        self._iovecs = threading.local()

    def read_into(self, view: memoryview, offset: int) -> int:
        n = max(0, min(len(view), self.size - offset))
        if not n or self._map is None:
            return 0
        if self._vm_read is not None:
            # The kernel copies through the mapping, as a load would, but a page past the end of a file
            # that shrank, even mid-copy, comes back as a short count instead of a SIGBUS.
            try:
                local, remote = self._iovecs.pair
            except AttributeError:  # this thread's first read: its own pair, reused by every later read
                local, remote = self._iovecs.pair = (_IOVec(), _IOVec())
            local.base, local.len = address_of(view), n
            remote.base, remote.len = self._base + offset, n
            got = self._vm_read(_PID[0], ctypes.addressof(local), 1, ctypes.addressof(remote), 1, 0)
            # ctypes does not retry an interrupted call as Python's own os calls do (PEP 475): retry here.
            while got < 0 and ctypes.get_errno() == errno.EINTR:
                got = self._vm_read(_PID[0], ctypes.addressof(local), 1, ctypes.addressof(remote), 1, 0)
            if got != n:
                raise self._cut_short(offset + max(got, 0), n - max(got, 0), ctypes.get_errno())
            return n
        # Without it, touching a page past the end of a file that shrank raises SIGBUS, which kills the
        # process: check the size first (this leaves a race with a truncate during the copy). Windows refuses to
        # shrink a mapped file (ERROR_USER_MAPPED_FILE), so there the check, a stat per read, is not made.
        if MAPPED_FILES_CAN_SHRINK and offset + n > os.fstat(self.fd).st_size:
            raise self._cut_short(offset, n, 0)
        view[:n] = self._bytes[offset:offset + n]  # type: ignore[index]
        return n

    def done_with(self, offset: int, length: int) -> None:
        # MADV_DONTNEED unmaps the pages from this process (the page cache keeps them), so a pass over the whole
        # file holds no more of it resident than it is reading. Whole pages only: a page the range shares with
        # bytes not yet read stays. Windows has no madvise: its working set is the OS's to trim.
        advice = getattr(mmap, "MADV_DONTNEED", None)
        if advice is None or self._map is None:
            return
        start = align_up(offset, mmap.PAGESIZE)
        stop = self.size if offset + length >= self.size else align_down(offset + length, mmap.PAGESIZE)
        if stop > start:
            with contextlib.suppress(OSError, ValueError):
                self._map.madvise(advice, start, stop - start)

    def _cut_short(self, offset: int, length: int, err: int) -> ReadError:
        """The copy of [offset, offset + length) out of the map failed: the file shrank (it changed), or a
        page could not be read in (process_vm_readv's EFAULT, where a CPU load would have raised SIGBUS)."""
        now = os.fstat(self.fd).st_size
        if now < self.size:
            return ReadError(self.path, f"file shrank to {now} bytes while mapped (changed while reading?)",
                             offset=offset)
        return FailedRead(self.path, f"mmap copy of {length} bytes failed: {os.strerror(err) if err else 'short copy'}",
                          offset=offset, mode=self.mode, length=length, errno=err or None)

    def close(self) -> None:
        if self._bytes is not None:
            self._bytes.release()
            self._bytes = None
        if self._map is not None:
            self._map.close()
            self._map = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


# --- Linux O_DIRECT ------------------------------------------------------------------------------

STATX_DIOALIGN = 0x2000
_AT_FDCWD = -100
_STATX_SIZE = 256
_STATX_DIO_MEM_ALIGN = 152  # byte offsets in struct statx (include/uapi/linux/stat.h)
_STATX_DIO_OFFSET_ALIGN = 156
_SYS_STATX = {"x86_64": 332, "aarch64": 291, "arm64": 291, "riscv64": 291, "loongarch64": 291,
              "ppc64le": 383, "ppc64": 383, "s390x": 379, "armv7l": 397, "i686": 383}


def dio_alignment(path: str) -> Alignment | None:
    """Direct-I/O alignment from statx(STATX_DIOALIGN) (Linux 6.1+), or None when the kernel cannot say.

    Returns Alignment(0, 0, "statx") when the kernel says this file does not support direct I/O.
    """
    if not sys.platform.startswith("linux"):
        return None
    nr = _SYS_STATX.get(platform.machine())
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    buf = ctypes.create_string_buffer(_STATX_SIZE)
    raw_path = os.fsencode(path)
    if nr is not None:
        rc = libc.syscall(nr, _AT_FDCWD, raw_path, 0, STATX_DIOALIGN, buf)
    elif hasattr(libc, "statx"):
        rc = libc.statx(_AT_FDCWD, raw_path, 0, STATX_DIOALIGN, buf)
    else:
        return None
    if rc != 0:
        return None
    mask = struct.unpack_from("<I", buf.raw, 0)[0]
    if not mask & STATX_DIOALIGN:
        return None
    mem, off = struct.unpack_from("<II", buf.raw, _STATX_DIO_MEM_ALIGN)
    return Alignment(off, mem, "statx")


class LinuxDirectReader(BufferedReader):
    """O_DIRECT: offset, length and buffer address must all be aligned, or the kernel says EINVAL."""

    mode = "direct"

    def __init__(self, path: str) -> None:
        found = dio_alignment(path)
        if found is not None and found.offset == 0:
            raise DirectIOUnavailable(path, "the filesystem does not support direct I/O (statx "
                                            "STATX_DIOALIGN reports 0)")
        super().__init__(path, os.O_DIRECT)
        self.alignment = found or Alignment(FALLBACK_DIO_ALIGN, FALLBACK_DIO_ALIGN, "fallback")
        self._probe()

    def _probe(self) -> None:
        """One aligned read at offset 0: some filesystems accept O_DIRECT at open and refuse every read."""
        for align in dict.fromkeys((self.alignment.offset, FALLBACK_DIO_ALIGN)):
            buf = Buffer(align)
            try:
                positioned.pread_into(self.fd, buf.view, 0)
            except OSError as err:
                if err.errno != errno.EINVAL:
                    raise self._failed(err, 0, align) from err
                continue
            finally:
                buf.close()
            if align != self.alignment.offset:  # the kernel's figure was too small for this device
                self.alignment = Alignment(align, max(align, self.alignment.memory), "probe")
            self.probed = align
            return
        self.close()
        raise DirectIOUnavailable(self.path, "direct reads fail with EINVAL even when aligned")

    def read_into(self, view: memoryview, offset: int) -> int:
        try:
            return positioned.pread_into(self.fd, view, offset)
        except OSError as err:
            if err.errno == errno.EINVAL:
                a = self.alignment
                raise FailedRead(self.path, f"direct read of {len(view)} bytes failed: EINVAL (offset and "
                                            f"length must be multiples of {a.offset}, the buffer address of "
                                            f"{a.memory}; buffer at 0x{address_of(view):x})",
                                 offset=offset, mode=self.mode, length=len(view), errno=errno.EINVAL) from err
            raise self._failed(err, offset, len(view)) from err


# --- macOS F_NOCACHE -----------------------------------------------------------------------------

F_NOCACHE = 48


class MacNoCacheReader(BufferedReader):
    """macOS: F_NOCACHE turns the page cache off for this descriptor; there are no alignment rules."""

    mode = "direct"

    def __init__(self, path: str, fcntl_fn: Callable[[int, int, int], Any] | None = None) -> None:
        super().__init__(path)
        if fcntl_fn is None:
            import fcntl
            fcntl_fn = fcntl.fcntl
        try:
            fcntl_fn(self.fd, F_NOCACHE, 1)
        except OSError as err:
            self.close()
            raise DirectIOUnavailable(path, f"fcntl(F_NOCACHE) failed: {err.strerror}") from None


# --- Windows FILE_FLAG_NO_BUFFERING --------------------------------------------------------------

GENERIC_READ = 0x80000000
FILE_SHARE_READ = 0x1
FILE_SHARE_DELETE = 0x4
OPEN_EXISTING = 3
FILE_FLAG_NO_BUFFERING = 0x20000000
FILE_STORAGE_INFO_CLASS = 16  # FILE_INFO_BY_HANDLE_CLASS.FileStorageInfo
MEM_COMMIT, MEM_RESERVE, MEM_RELEASE, PAGE_READWRITE = 0x1000, 0x2000, 0x8000, 0x04
ERROR_INVALID_PARAMETER = 87
INVALID_HANDLE_VALUE = ctypes.c_void_p(-1).value


class FILE_STORAGE_INFO(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint32) for name in (
        "LogicalBytesPerSector", "PhysicalBytesPerSectorForAtomicity", "PhysicalBytesPerSectorForPerformance",
        "FileSystemEffectivePhysicalBytesPerSectorForAtomicity", "Flags", "ByteOffsetForSectorAlignment",
        "ByteOffsetForPartitionAlignment")]


class WindowsDirectReader(Reader):
    """CreateFileW + FILE_FLAG_NO_BUFFERING: offset and length in whole sectors, buffers from VirtualAlloc.

    *kernel32* is injectable so the same code runs on Linux against a stand-in that enforces the rules.
    """

    mode = "direct"

    def __init__(self, path: str, kernel32: Any = None) -> None:
        self.k = kernel32 if kernel32 is not None else windows.kernel32()
        handle = self.k.CreateFileW(path, GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_DELETE, None,
                                    OPEN_EXISTING, FILE_FLAG_NO_BUFFERING, None)
        if handle is None or handle in (-1, INVALID_HANDLE_VALUE):
            code = self.k.GetLastError()
            # OSError with a winerror is, on Windows, the standard exception of its errno (a sharing violation
            # a PermissionError): the ReadError is that exception too.
            raise ReadError.for_os_error(path, f"CreateFileW failed: Windows error {code}",
                                         OSError(None, f"Windows error {code}", path, code))
        self.handle = handle
        size = ctypes.c_int64(0)
        if not self.k.GetFileSizeEx(handle, ctypes.pointer(size)):
            err = self.k.GetLastError()
            self.close()
            raise ReadError(path, f"GetFileSizeEx failed: Windows error {err}")
        super().__init__(path, size.value)
        self.alignment = self._sector_alignment()

    def _sector_alignment(self) -> Alignment:
        info = FILE_STORAGE_INFO()
        ok = self.k.GetFileInformationByHandleEx(self.handle, FILE_STORAGE_INFO_CLASS, ctypes.pointer(info),
                                                 ctypes.sizeof(info))
        if not ok or not info.LogicalBytesPerSector:
            return Alignment(FALLBACK_DIO_ALIGN, FALLBACK_DIO_ALIGN, "fallback")
        # Logical is the hard minimum; the performance size is a multiple of it, so honouring it is safe.
        sector = max(info.LogicalBytesPerSector, info.PhysicalBytesPerSectorForPerformance)
        return Alignment(sector, sector, "sector-size")

    def alloc(self, size: int) -> Buffer:
        size = align_up(max(size, 1), self.alignment.offset)
        addr = self.k.VirtualAlloc(None, size, MEM_COMMIT | MEM_RESERVE, PAGE_READWRITE)
        if not addr:
            raise ReadError(self.path, f"VirtualAlloc of {size} bytes failed: Windows error "
                                       f"{self.k.GetLastError()}")
        view = memoryview((ctypes.c_char * size).from_address(addr)).cast("B")
        return Buffer(size, view, lambda: self.k.VirtualFree(addr, 0, MEM_RELEASE))

    def read_into(self, view: memoryview, offset: int) -> int:
        got = ctypes.c_uint32(0)
        ok = self.k.ReadFile(self.handle, address_of(view), len(view), ctypes.pointer(got),
                             ctypes.pointer(windows.overlapped_at(offset)))
        if ok:
            return got.value  # TRUE with 0 bytes is the other documented end-of-file answer
        err = self.k.GetLastError()
        if err == windows.ERROR_HANDLE_EOF:
            return 0
        why = f"Windows error {err}"
        if err == ERROR_INVALID_PARAMETER:
            why += (f" (ERROR_INVALID_PARAMETER: offset, length and buffer address must be multiples of the "
                    f"{self.alignment.offset}-byte sector)")
        raise FailedRead(self.path, f"ReadFile of {len(view)} bytes failed: {why}", offset=offset, mode=self.mode,
                         length=len(view))

    def close(self) -> None:
        if getattr(self, "handle", None) is not None:
            self.k.CloseHandle(self.handle)
            self.handle = None


def open_reader(path: str, mode: str, *, system: str | None = None, kernel32: Any = None) -> Reader:
    """Open *path* for the read path *mode* ("buffered", "mmap" or "direct") on this (or *system*'s) OS.

    Raises DirectIOUnavailable when direct I/O is impossible here, so the caller can say so once.
    """
    if mode not in PATHS:
        raise UsageError(None, f"unknown read path {mode!r}; choose from {', '.join(PATHS)}", field="mode")
    system = system or sys.platform
    if mode == "buffered":
        return BufferedReader(path)
    if mode == "mmap":
        return MmapReader(path)
    if os.path.isdir(path):  # O_DIRECT says EINVAL and CreateFileW "access denied" for a folder
        raise ReadError(path, "is a directory")
    if system.startswith("linux"):
        if not hasattr(os, "O_DIRECT"):
            raise DirectIOUnavailable(path, "this Python has no O_DIRECT")
        return LinuxDirectReader(path)
    if system == "win32":
        return WindowsDirectReader(path, kernel32)
    if system == "darwin":
        return MacNoCacheReader(path)
    raise DirectIOUnavailable(path, f"no direct-I/O read path for platform {system!r}")
