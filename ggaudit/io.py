"""The one place that opens files read-only and reads at an offset, on every platform.

POSIX: ``os.open`` with ``O_RDONLY | O_CLOEXEC | O_NONBLOCK`` (so a FIFO cannot hang the open; it changes
nothing for a regular file) and ``os.pread``/``os.preadv``. Windows CPython has neither: there a read is
``ReadFile`` on the descriptor's handle with the offset in an ``OVERLAPPED``, so threads sharing one
descriptor never race on a file pointer, and ``ERROR_HANDLE_EOF`` (38) is the end of the file.

Every module that reads a file opens it here (``open_readonly``) and reads it here (``pread``,
``pread_into``, ``pread_exact``); the read paths in :mod:`ggaudit.evidence.readers` that need more of the OS
(O_DIRECT, FILE_FLAG_NO_BUFFERING, F_NOCACHE) still open their descriptors through :func:`open_fd`.

:func:`read_through` reads a file once and hands each chunk to several consumers (a sha256, per-tensor
digests, a scan), so the jobs share one read pass without importing one another.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import mmap
import os
import queue
import stat
import struct
import sys
import threading
from dataclasses import dataclass
from typing import Any, Protocol
from collections.abc import Callable, Iterator, Sequence

import xxhash

from .errors import ReadError, UsageError

WINDOWS = sys.platform == "win32"

#: Flags every read-only open uses. O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
#: writer forever. O_BINARY: Windows' C runtime would otherwise translate line ends.
READ_FLAGS = (os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
              | getattr(os, "O_NOINHERIT", 0) | getattr(os, "O_NONBLOCK", 0))

#: Largest single Windows request: ReadFile counts bytes in a DWORD. Linux caps one read a little
#: under 2 GiB too, so callers already loop (pread_exact) or treat the count as one request's answer.
_MAX_REQUEST = 1 << 30

ERROR_HANDLE_EOF = 38


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
    """The one-line error for a failed open. Windows refuses to open a folder with EACCES: say what it is."""
    if isinstance(err, PermissionError) and os.path.isdir(path):
        return ReadError(path, "is a directory")
    return ReadError(path, f"cannot open: {err.strerror or err}")


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
            raise ReadError(path, f"file changed {when}: {err.strerror}") from None

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


# --- positioned reads ------------------------------------------------------------------------------

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


def address_of(view: memoryview) -> int:
    """The memory address of a writable buffer (to hand to the OS, or to check its alignment)."""
    anchor = ctypes.c_char.from_buffer(view)
    try:
        return ctypes.addressof(anchor)
    finally:
        del anchor


def _win_read(fd: int, address: int, length: int, offset: int) -> int:
    import msvcrt
    k = kernel32()
    got = ctypes.c_uint32(0)
    ov = overlapped_at(offset)
    handle = msvcrt.get_osfhandle(fd)  # type: ignore[attr-defined]
    if k.ReadFile(handle, address, min(length, _MAX_REQUEST), ctypes.byref(got), ctypes.byref(ov)):
        return got.value
    code = k.GetLastError()
    if code == ERROR_HANDLE_EOF:
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
            raise ReadError(path, f"read failed: {err.strerror or err}", offset=offset + got) from err
        finally:
            part.release()
        if n == 0:
            raise ReadError(path, f"file ended early: expected at least {offset + len(view)} bytes, "
                            "it shrank or was replaced while being read", offset=offset + got)
        got += n


# --- hints ------------------------------------------------------------------------------------------

def advise(fd: int, offset: int, length: int, advice: str) -> None:
    """posix_fadvise(*advice*: "sequential" or "willneed") where the OS has it; only a hint, so a refusal
    and a platform without it (Windows, macOS) change nothing."""
    fn = getattr(os, "posix_fadvise", None)
    if fn is None:
        return
    with contextlib.suppress(OSError):
        fn(fd, offset, length, os.POSIX_FADV_SEQUENTIAL if advice == "sequential" else os.POSIX_FADV_WILLNEED)


def advise_mapping(mapping: mmap.mmap) -> None:
    """Ask the OS to fault a fresh mapping's pages in ahead of use (MADV_WILLNEED: read-ahead of the
    whole window at once instead of a fault per 64 KiB); only a hint, absent on Windows."""
    advice = getattr(mmap, "MADV_WILLNEED", None)
    if advice is not None and hasattr(mapping, "madvise"):
        with contextlib.suppress(OSError, ValueError):
            mapping.madvise(advice)


def available_cores() -> int:
    """CPUs this process may run on: its affinity where the OS says (Linux; a container's cpuset), else
    the machine's count."""
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        with contextlib.suppress(OSError):
            return max(1, len(affinity(0)))
    return os.cpu_count() or 1


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


# --- the page cache ---------------------------------------------------------------------------------
#
# Buffered and mmap reads come from the page cache, direct reads from the device. When they disagree, the
# test is to drop the file's clean pages and read again through the cache: bytes that now match the device
# were the device's all along (a lost write under a still-cached file); bytes that still match the old cache
# say the direct path is the one that is wrong. These functions are that test's OS layer: what is cached
# (cache_state), dropping it (evict), and whether a direct read is independent of the cache at all
# (direct_shares_page_cache, probe_direct_fills_cache).

LINUX = sys.platform.startswith("linux")
MACOS = sys.platform == "darwin"
PAGE_SIZE = mmap.PAGESIZE

_SYS_CACHESTAT = 451            # the same number on every architecture: the unified syscall table (Linux 6.5)
_PROT_NONE, _MAP_SHARED = 0, 1  # the same values on Linux and macOS
_MS_INVALIDATE = 2              # macOS <sys/mman.h>
_MINCORE_WINDOW = 1 << 30       # bytes mapped at once: bounds the address space and the residency vector
_CAP_FOWNER = 3

_LIBC: Any = None


def _libc() -> Any:
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


def _os_error(what: str) -> OSError:
    code = ctypes.get_errno()
    return OSError(code, f"{what}: {os.strerror(code)}")


@dataclass(frozen=True)
class CacheState:
    """How many pages of a range of a file are in the page cache, and how many of them are dirty or under
    writeback (None: this OS cannot tell)."""

    pages: int          # pages the range spans (cut at the end of the file: no page past it can be cached)
    cached: int         # of them resident in the page cache
    dirty: int | None   # of them dirty or being written back; None when unknown (mincore cannot tell)


def _page_span(fd: int, offset: int, length: int) -> tuple[int, int]:
    """The first page and the page count of ``[offset, offset + length)`` cut at the end of the file
    (``length`` 0: to the end, as posix_fadvise reads it)."""
    if offset < 0 or length < 0:
        raise ValueError(f"bad range: offset {offset}, length {length}")
    size = os.fstat(fd).st_size
    end = size if length == 0 else min(offset + length, size)
    if end <= offset:
        return offset // PAGE_SIZE, 0
    first = offset // PAGE_SIZE
    return first, (end - 1) // PAGE_SIZE - first + 1


def cache_state(fd: int, offset: int, length: int) -> CacheState | None:
    """How much of ``[offset, offset + length)`` of the file open as *fd* is in the page cache (``length`` 0:
    to the end of the file). None where the OS cannot tell this process.

    Linux: the cachestat syscall (6.5+), which also counts dirty and writeback pages. Where it is missing
    (ENOSYS) or refused (EPERM: a seccomp filter, or the kernel's own rule below), mincore() over a
    PROT_NONE shared mapping of the range: mapping faults nothing in, and the vector says which pages are
    resident; it cannot tell dirty ones. Both answer only for a file this process could write to or owns
    (CAP_FOWNER counts): for any other file cachestat says EPERM and mincore reports every page resident,
    a lie (mm/mincore.c can_do_mincore, Linux 5.0; mm/filemap.c can_do_cachestat), so then None.
    macOS: mincore over a mapping, as on Linux. Windows: None (no call reports one file's cached pages).
    """
    first, pages = _page_span(fd, offset, length)
    if pages == 0:
        return CacheState(pages=0, cached=0, dirty=0)
    if not (LINUX or MACOS):
        return None
    if LINUX:
        found = _cachestat(fd, first * PAGE_SIZE, pages * PAGE_SIZE)
        if found is not None:
            return CacheState(pages=pages, cached=found[0], dirty=found[1])
        if not _may_see_cache(fd):
            return None
    return CacheState(pages=pages, cached=_mincore(fd, first, pages), dirty=None)


class _CachestatRange(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Cachestat(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in
                ("nr_cache", "nr_dirty", "nr_writeback", "nr_evicted", "nr_recently_evicted")]


def _cachestat(fd: int, offset: int, length: int) -> tuple[int, int] | None:
    """(cached, dirty + writeback) pages of the range by cachestat; None when it is missing or refused
    (ENOSYS, EPERM) and mincore may answer instead. Any other failure is raised."""
    rng, out = _CachestatRange(offset, length), _Cachestat()
    libc = _libc()
    if libc.syscall(ctypes.c_long(_SYS_CACHESTAT), ctypes.c_long(fd), ctypes.byref(rng), ctypes.byref(out),
                    ctypes.c_long(0)) == 0:
        return out.nr_cache, out.nr_dirty + out.nr_writeback
    if ctypes.get_errno() in (errno.ENOSYS, errno.EPERM):
        return None
    raise _os_error("cachestat")


def _may_see_cache(fd: int) -> bool:
    """Whether Linux tells this process which pages of *fd*'s file are cached: only when it could open the
    file for writing, owns it, or holds CAP_FOWNER (mm/mincore.c can_do_mincore)."""
    st = os.fstat(fd)
    if st.st_uid == os.geteuid() or _has_capability(_CAP_FOWNER):
        return True
    import fcntl
    if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDONLY:
        return True
    return os.access(f"/proc/self/fd/{fd}", os.W_OK, effective_ids=os.access in os.supports_effective_ids)


def _has_capability(number: int) -> bool:
    """Whether this process holds a Linux capability in its effective set (/proc/self/status CapEff)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> number & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


_LOW_BIT = bytes(i & 1 for i in range(256))   # mincore's residency bit; macOS keeps other flags beside it


def _mincore(fd: int, first: int, pages: int) -> int:
    """Resident pages of ``pages`` pages from page ``first``, by mincore over PROT_NONE shared mappings
    (nothing can be read through them, so nothing is faulted in), a window at a time."""
    cached = 0
    for addr, n in _windows(fd, first, pages, "mincore"):
        vec = ctypes.create_string_buffer(n)
        if _libc().mincore(addr, n * PAGE_SIZE, vec) != 0:
            raise _os_error("mincore")
        cached += vec.raw[:n].translate(_LOW_BIT).count(1)
    return cached


def _windows(fd: int, first: int, pages: int, what: str) -> Iterator[tuple[int, int]]:
    """PROT_NONE shared mappings of ``pages`` pages of ``fd`` from page ``first``, a window at a time: (address,
    pages); each is unmapped once the caller is done with it."""
    libc, window = _libc(), _MINCORE_WINDOW // PAGE_SIZE
    for start in range(first, first + pages, window):
        n = min(window, first + pages - start)
        addr = libc.ggaudit_mmap(None, n * PAGE_SIZE, _PROT_NONE, _MAP_SHARED, fd, start * PAGE_SIZE)
        if addr is None or addr == ctypes.c_void_p(-1).value:
            raise _os_error(f"mmap for {what}")
        try:
            yield addr, n
        finally:
            libc.munmap(addr, n * PAGE_SIZE)


def evict(fd: int, offset: int, length: int) -> str | None:
    """Ask the kernel to drop the clean pages of ``[offset, offset + length)`` (``length`` 0: to the end of the
    file) from the page cache, so the next buffered or mmap read of them comes from the device. None when
    asked; otherwise why this OS cannot do it, in words. Whether the pages went is :func:`cache_state`'s to say.

    Linux: posix_fadvise(POSIX_FADV_DONTNEED). It drops only whole pages inside the range (a partial page at
    either end stays, except the file's last one), and only whole folios: a file written in one write() can
    sit in large folios that no partial range drops (seen on Linux 6.18 ext4), so evict the whole file
    (``length`` 0) when it must go. It never drops dirty pages (it starts their writeback and leaves them), nor
    pages some process has mapped. macOS: no posix_fadvise, but msync(MS_INVALIDATE) over a
    shared mapping of the range writes its dirty pages and then discards the range's pages from the unified
    buffer cache (xnu bsd/kern/kern_mman.c msync: MS_INVALIDATE without MS_ASYNC is VM_SYNC_SYNCHRONOUS |
    VM_SYNC_INVALIDATE; fio's discard_pages on macOS does the same). An OSError from the call propagates.
    """
    first, pages = _page_span(fd, offset, length)
    if LINUX:
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)
        return None
    if MACOS:
        if pages:
            _msync_invalidate(fd, first, pages)
        return None
    if WINDOWS:
        return ("Windows has no call that drops one file's pages from its cache (the standby list can only be "
                "emptied whole, with a system privilege)")
    return f"ggaudit knows no call that drops one file's pages from the page cache on {sys.platform}"


def _msync_invalidate(fd: int, first: int, pages: int) -> None:
    for addr, n in _windows(fd, first, pages, "msync"):
        if _libc().msync(addr, n * PAGE_SIZE, _MS_INVALIDATE) != 0:
            raise _os_error("msync(MS_INVALIDATE)")


# Whether direct reads are independent of the page cache. Linux sources for each rule are in
# direct_shares_page_cache's docstring.

TMPFS_MAGIC, RAMFS_MAGIC, ZFS_MAGIC = 0x01021994, 0x858458F6, 0x2FC12FC1
EXT4_MAGIC, F2FS_MAGIC = 0xEF53, 0xF2F52010

_FS_IOC_GETFLAGS = 0x80086601 if ctypes.sizeof(ctypes.c_long) == 8 else 0x80046601
_FS_IOC_FIEMAP = 0xC020660B
_FS_COMPR_FL, _FS_ENCRYPT_FL, _FS_JOURNAL_DATA_FL = 0x4, 0x800, 0x4000
_FS_VERITY_FL, _FS_INLINE_DATA_FL = 0x100000, 0x10000000
_FIEMAP_EXTENT_LAST = 0x1
#: FIEMAP extent flags whose bytes a direct read cannot take from the device as they lie there.
_FIEMAP_BUFFERED = {0x8: "compressed or otherwise encoded (FIEMAP_EXTENT_ENCODED)",
                    0x200: "stored inline in the metadata (FIEMAP_EXTENT_DATA_INLINE)",
                    0x400: "packed with other files' tails (FIEMAP_EXTENT_DATA_TAIL)",
                    0x100: "not block-aligned (FIEMAP_EXTENT_NOT_ALIGNED)"}
_FIEMAP_ENCRYPTED = 0x80
_FIEMAP_BATCH, _FIEMAP_MAX_EXTENTS = 256, 4096
_STATX_DIOALIGN, _AT_EMPTY_PATH = 0x2000, 0x1000
_SYS_STATX = {"x86_64": 332, "aarch64": 291, "arm64": 291, "riscv64": 291, "loongarch64": 291,
              "ppc64le": 383, "ppc64": 383, "s390x": 379, "armv7l": 397, "i686": 383}

_TMPFS_REASON = "a tmpfs keeps files in the page cache: O_DIRECT reads there (Linux 6.6+) come from it"
_RAMFS_REASON = "a ramfs keeps files in the page cache only: there is no device for a direct read to reach"
_MACOS_REASON = ("macOS F_NOCACHE reads a page already in the unified buffer cache from it (xnu "
                 "vfs_cluster.c cluster_read_direct reads only pages absent from the cache): evict the range "
                 "first for a read from the device")


def direct_shares_page_cache(path: str, fd: int | None = None) -> str | None:
    """Why direct reads of *path* are served from the page cache rather than the device, so a direct read
    is NOT independent of buffered and mmap reads, in words; None when, as far as can be told, they come from
    the device. *fd*: the file already open (read-only will do); otherwise it is opened here. Cheap: a few
    system calls, no data read.

    Linux, what was found and where:

    - tmpfs (statfs TMPFS_MAGIC): takes O_DIRECT since Linux 6.6 and serves it from the page cache, which
      is where its files live. ramfs (RAMFS_MAGIC): the same, with no device at all.
    - ZFS (ZFS_SUPER_MAGIC) before OpenZFS 2.3 (/sys/module/zfs/version): O_DIRECT is accepted and served
      from the ARC; 2.3 added real Direct I/O (release notes, openzfs/zfs#10018). Not detected: a 2.3+
      dataset with ``direct=disabled``, or a read not aligned as it needs, still goes through the ARC.
    - ext4 and f2fs accept O_DIRECT on a file they cannot read directly and fall back to buffered I/O:
      ext4 with data journaling (mount data=journal, or the file's journal-data flag), inline data,
      fs-verity, or fscrypt encryption without inline encryption (fs/ext4/file.c ext4_dio_supported;
      Documentation/filesystems/fscrypt.rst "Direct I/O support"); f2fs also for compressed files
      (fs/f2fs/f2fs.h f2fs_force_buffered_io). Since Linux 6.1 they say so in statx: STATX_DIOALIGN with
      an offset alignment of 0 while open(O_DIRECT) succeeds (LTP statx10 relies on this for ext4); for
      older kernels the mount options (/proc/self/mountinfo) and the file's flags (FS_IOC_GETFLAGS) tell.
    - btrfs reads compressed and inline extents through the page cache even under O_DIRECT (fs/btrfs
      direct I/O: -ENOTBLK for them, then filemap_read); FS_IOC_FIEMAP marks them ENCODED / DATA_INLINE.
      The same extent flags (and DATA_TAIL, NOT_ALIGNED, DATA_ENCRYPTED without inlinecrypt) are checked on
      every filesystem, for the first 4096 extents of the file only (a bound on the cost; a compressed file
      shows it in its first extent).

    Not detected: overlayfs (its statfs says overlay, not what is under it: a tmpfs layer shows up only as
    pages that :func:`evict` cannot drop), FUSE and network filesystems (the server's cache is beyond
    this machine's page cache, and not the device either).

    macOS: F_NOCACHE reads pages that are already cached from the cache (see the reason). Windows: None
    (FILE_FLAG_NO_BUFFERING reads the volume; the cache manager flushes the file's dirty data first).
    """
    if MACOS:
        return _MACOS_REASON
    if not LINUX:
        return None
    with _descriptor(path, fd) as own:
        return _linux_reason(path, own)


@contextlib.contextmanager
def _descriptor(path: str, fd: int | None) -> Iterator[int]:
    """*fd* as it is, or *path* opened read-only for the block and closed after."""
    if fd is not None:
        yield fd
        return
    own = open_fd(path)
    try:
        yield own
    finally:
        os.close(own)


def _linux_reason(path: str, fd: int) -> str | None:
    magic = _fs_magic(fd)
    if magic == TMPFS_MAGIC:
        return _TMPFS_REASON
    if magic == RAMFS_MAGIC:
        return _RAMFS_REASON
    if magic == ZFS_MAGIC:
        return _zfs_reason()
    options = _mount_options(os.fstat(fd).st_dev)
    checks: tuple[Callable[[], str | None], ...] = (
        lambda: _statx_reason(path, fd), lambda: _mount_reason(magic, options),
        lambda: _flags_reason(fd, magic, options), lambda: _fiemap_reason(fd, options))
    return next((reason for check in checks if (reason := check()) is not None), None)


def _fs_magic(fd: int) -> int | None:
    """The filesystem type of *fd* (statfs f_type), or None when the call fails."""
    buf = ctypes.create_string_buffer(256)      # struct statfs is 120 bytes on 64-bit Linux
    if _libc().fstatfs(fd, buf) != 0:
        return None
    # f_type opens the struct: a long (an unsigned int on s390x, big-endian, so the first four bytes).
    kind = ctypes.c_uint32 if os.uname().machine == "s390x" else ctypes.c_long
    return int(kind.from_buffer(buf).value) & 0xFFFFFFFF


def _zfs_reason(version_file: str = "/sys/module/zfs/version") -> str | None:
    try:
        with open(version_file, encoding="ascii", errors="replace") as f:
            text = f.read().strip()
        major, minor = (int(part) for part in text.split("-")[0].split(".")[:2])
    except (OSError, ValueError):
        return "ZFS before OpenZFS 2.3 serves O_DIRECT from its ARC cache, and this module's version is unknown"
    if (major, minor) < (2, 3):
        return f"OpenZFS {text} (before 2.3) accepts O_DIRECT and serves it from its ARC cache"
    return None


def _mount_options(device: int) -> set[str]:
    """The mount and superblock options of the filesystem on *device* (/proc/self/mountinfo), or none."""
    wanted = f"{os.major(device)}:{os.minor(device)}"
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 6 and fields[2] == wanted and "-" in fields:
                    after = fields[fields.index("-") + 1:]
                    return set(fields[5].split(",")) | (set(after[2].split(",")) if len(after) > 2 else set())
    except OSError:
        pass
    return set()


def _statx_reason(path: str, fd: int) -> str | None:
    """ext4/f2fs (Linux 6.1+): statx reports no direct I/O for the file, yet O_DIRECT opens: the fallback."""
    nr = _SYS_STATX.get(os.uname().machine)
    if nr is None:
        return None
    buf = ctypes.create_string_buffer(256)
    if _libc().syscall(ctypes.c_long(nr), ctypes.c_long(fd), b"", ctypes.c_long(_AT_EMPTY_PATH),
                       ctypes.c_long(_STATX_DIOALIGN), buf) != 0:
        return None
    mask = ctypes.c_uint32.from_buffer(buf).value
    offset_align = ctypes.c_uint32.from_buffer(buf, 156).value     # stx_dio_offset_align
    if not mask & _STATX_DIOALIGN or offset_align != 0 or not _opens_direct(path):
        return None
    return ("the filesystem reports no direct I/O for this file (statx STATX_DIOALIGN: 0) yet accepts O_DIRECT: "
            "ext4 and f2fs then serve direct reads through the page cache (data journaling, inline data, "
            "fs-verity, encryption, compression)")


def _opens_direct(path: str) -> bool:
    try:
        os.close(open_fd(path, getattr(os, "O_DIRECT", 0)))
    except OSError:
        return False
    return True


def _mount_reason(magic: int | None, options: set[str]) -> str | None:
    if magic == EXT4_MAGIC and "data=journal" in options:
        return "ext4 mounted with data=journal serves O_DIRECT reads through the page cache"
    return None


def _flags_reason(fd: int, magic: int | None, options: set[str]) -> str | None:
    """ext4/f2fs: the file's own flags (FS_IOC_GETFLAGS) that make those filesystems fall back to buffered."""
    if magic not in (EXT4_MAGIC, F2FS_MAGIC):
        return None
    import fcntl
    try:
        flags = ctypes.c_int.from_buffer_copy(fcntl.ioctl(fd, _FS_IOC_GETFLAGS, bytes(8))[:4]).value
    except OSError:
        return None
    named = [(_FS_VERITY_FL, "has fs-verity"), (_FS_INLINE_DATA_FL, "keeps its data inline")]
    if magic == EXT4_MAGIC:
        named.append((_FS_JOURNAL_DATA_FL, "has data journaling (chattr +j)"))
    if magic == F2FS_MAGIC:
        named.append((_FS_COMPR_FL, "is compressed"))
    if "inlinecrypt" not in options:
        named.append((_FS_ENCRYPT_FL, "is encrypted (fscrypt, no inlinecrypt)"))
    for bit, what in named:
        if flags & bit:
            return f"the file {what}: {'ext4' if magic == EXT4_MAGIC else 'f2fs'} serves O_DIRECT reads of it " \
                   "through the page cache"
    return None


def _fiemap_reason(fd: int, options: set[str]) -> str | None:
    """An extent a direct read cannot take from the device as it lies (FS_IOC_FIEMAP, first extents only)."""
    import fcntl
    wanted = dict(_FIEMAP_BUFFERED)
    if "inlinecrypt" not in options:
        wanted[_FIEMAP_ENCRYPTED] = "encrypted by the filesystem (FIEMAP_EXTENT_DATA_ENCRYPTED)"
    start, seen = 0, 0
    while seen < _FIEMAP_MAX_EXTENTS:
        answer = bytearray(32 + 56 * _FIEMAP_BATCH)     # the kernel fills the extents in place
        struct.pack_into("=QQIIII", answer, 0, start, (1 << 64) - 1 - start, 0, 0, _FIEMAP_BATCH, 0)
        try:
            fcntl.ioctl(fd, _FS_IOC_FIEMAP, answer, True)
        except OSError:
            return None
        mapped = struct.unpack_from("=I", answer, 20)[0]
        if mapped == 0:
            return None
        for i in range(mapped):
            logical, _, length, _, _, flags = struct.unpack_from("=QQQQQI", answer, 32 + 56 * i)
            for bit, what in wanted.items():
                if flags & bit:
                    return f"the extent at file offset {logical} is {what}: the filesystem reads it through " \
                           "the page cache even under O_DIRECT"
            if flags & _FIEMAP_EXTENT_LAST:
                return None
            start = logical + length
        seen += mapped
    return None


def probe_direct_fills_cache(path: str, fd: int | None = None) -> str | None:
    """A test, not a rule: direct-read up to two pages of the file that are not in the page cache, then ask
    whether they are now. The reason when every page read so came into the cache (the filesystem serves
    O_DIRECT through it, whatever the reason); None when none did, and also when no test could be made
    (not Linux, the cache state unknown, every page tried already cached, O_DIRECT refused), so None claims
    nothing. Reads one page per probe; changes nothing else (a read-only descriptor of *path* is opened).
    """
    if not LINUX:
        return None
    with _descriptor(path, fd) as own:
        pages = _uncached_pages(own, want=2)
        if not pages:
            return None
        try:
            direct = open_fd(path, os.O_DIRECT)
        except OSError:
            return None
        try:
            buf = mmap.mmap(-1, PAGE_SIZE)      # page-aligned, as O_DIRECT needs
            try:
                for page in pages:
                    os.preadv(direct, [buf], page * PAGE_SIZE)
            except OSError:
                return None
            finally:
                buf.close()
        finally:
            os.close(direct)
        after = [cache_state(own, page * PAGE_SIZE, PAGE_SIZE) for page in pages]
    if all(state is not None and state.cached for state in after):
        where = ", ".join(str(page * PAGE_SIZE) for page in pages)
        return f"a direct read of uncached pages (file offsets {where}) left them in the page cache: the " \
               "filesystem serves O_DIRECT reads of this file through it"
    return None


def _uncached_pages(fd: int, want: int, tries: int = 64) -> list[int]:
    """Up to *want* pages of the file not in the page cache, among *tries* spread over it."""
    total = -(-os.fstat(fd).st_size // PAGE_SIZE)
    found: list[int] = []
    for page in sorted({k * total // tries for k in range(min(tries, total))}):
        state = cache_state(fd, page * PAGE_SIZE, PAGE_SIZE)
        if state is None:
            return []
        if state.cached == 0:
            found.append(page)
            if len(found) == want:
                break
    return found


# --- one read, many consumers -------------------------------------------------------------------------
#
# A *chunk consumer* is any object with ``update(offset, data)``: it is handed the bytes of a file in
# order, chunk after chunk, each as a read-only ``memoryview`` with the absolute file ``offset`` of its
# first byte. :func:`read_through` reads the file once into a small ring of reused buffers and gives every
# chunk to every consumer, so a sha256 of the file, per-tensor digests and a NaN scan share one read::
#
#     sha = Sha256()
#     read_through(path, [sha, my_scanner])      # one pass over the file
#     sha.hexdigest()
#
# Rules for consumers: chunks arrive in file order, back to back, covering ``[start, end)`` exactly once;
# the ``memoryview`` is only valid during the call (the buffer is refilled afterwards: copy what you keep);
# each consumer runs in its own worker thread (``threaded=True``, the default), one chunk at a time, so it
# needs no locking of its own and the work that releases the GIL (hashlib, xxhash, numpy) overlaps the next
# read; an exception raised by a consumer stops the read and is re-raised by ``read_through``.

DEFAULT_CHUNK_SIZE = 8 << 20
"""Bytes per read: large enough that per-chunk Python overhead vanishes, small enough to stay cheap."""

DEFAULT_DEPTH = 3
"""Buffers in the ring: one being read while the consumers work on the others."""

#: The one progress callback of the library and the CLI, told (done, in all) as a long job advances: bytes
#: (once per chunk of a read, in the calling thread), or rows for ``rows`` (with its read path first:
#: :data:`ggaudit.rows.replay.ReadPathProgress`).
Progress = Callable[[int, int], None]


class ChunkConsumer(Protocol):
    """Anything that accepts a file's bytes chunk by chunk (see :func:`read_through`)."""

    def update(self, offset: int, data: memoryview) -> None:
        """Take the bytes ``data`` found at absolute file offset ``offset``; do not keep ``data``."""


class Hasher:
    """A hashlib-style object (``update``, ``hexdigest``) as a chunk consumer."""

    name: str

    def __init__(self, hash_object: Any) -> None:
        self._hash = hash_object

    def update(self, offset: int, data: memoryview) -> None:
        self._hash.update(data)

    def hexdigest(self) -> str:
        return str(self._hash.hexdigest())


class Sha256(Hasher):
    """sha256 of everything it is fed, as a chunk consumer."""

    name = "sha256"

    def __init__(self) -> None:
        super().__init__(hashlib.sha256())


class Xxh3_128(Hasher):
    """xxh3-128 of everything it is fed, as a chunk consumer."""

    name = "xxh3-128"

    def __init__(self) -> None:
        super().__init__(xxhash.xxh3_128())


#: The digests of a whole file a command can ask for by name.
ALGORITHMS: dict[str, Callable[[], Sha256 | Xxh3_128]] = {"sha256": Sha256, "xxh3-128": Xxh3_128}


class ChunkSource(Protocol):
    """Where :func:`feed` gets its chunks: a read path over one file (``ggaudit.check`` reads each path so)."""

    def buffer(self) -> Any:
        """A new writable buffer (bytearray, memoryview) of the source's chunk size."""

    def read_into(self, buf: Any) -> tuple[int, int] | None:
        """Fill ``buf`` with the next chunk; (its file offset, its length), or None past the last."""


def feed(source: ChunkSource, consumers: Sequence[ChunkConsumer], *, depth: int = DEFAULT_DEPTH,
         threaded: bool = True) -> None:
    """Give every chunk ``source`` reads to every consumer, as :func:`read_through` does for a buffered read:
    each consumer in its own thread, a ring of ``depth`` buffers, a consumer's exception re-raised here."""
    if threaded and consumers:
        _run_threaded(source, consumers, depth)
    else:
        _run_inline(source, consumers)


def read_through(path: str | os.PathLike[str], consumers: Sequence[ChunkConsumer], *,
                 start: int = 0, end: int | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE,
                 depth: int = DEFAULT_DEPTH, threaded: bool = True, progress: Progress | None = None) -> int:
    """Read ``path`` once from ``start`` to ``end`` (default: its size) and feed every consumer.

    Returns the number of bytes read. Raises ReadError if the file ends early (it shrank, or ``end``
    lies past its end) or a read fails; OSError from opening propagates for the caller to report.
    With ``threaded=False`` everything runs in the calling thread (simpler to debug, slower).
    ``progress(done, total)``: bytes of ``[start, end)`` read so far, after each chunk.
    """
    fd = open_fd(path)
    try:
        if end is None:
            end = os.fstat(fd).st_size
        if not 0 <= start <= end:
            raise ValueError(f"bad range [{start}, {end})")
        advise(fd, start, end - start, "sequential")
        feed(_ChunkReader(fd, os.fspath(path), start, end, chunk_size, progress), consumers, depth=depth,
             threaded=threaded)
        return end - start
    finally:
        os.close(fd)


class _ChunkReader:
    """Fills caller-owned buffers with consecutive chunks of ``[start, end)``."""

    def __init__(self, fd: int, path: str, start: int, end: int, chunk_size: int,
                 progress: Progress | None = None) -> None:
        self.fd, self.path, self.pos, self.end, self.chunk_size = fd, path, start, end, chunk_size
        self.start, self.progress = start, progress

    def buffer(self) -> bytearray:
        return bytearray(min(self.chunk_size, max(self.end - self.pos, 1)))

    def read_into(self, buf: bytearray) -> tuple[int, int] | None:
        """Read the next chunk into ``buf``; returns (offset, length), or None at ``end``."""
        if self.pos >= self.end:
            return None
        want = min(len(buf), self.end - self.pos)
        pread_exact(self.fd, self.path, memoryview(buf)[:want], self.pos)
        offset = self.pos
        self.pos += want
        if self.progress is not None:
            self.progress(self.pos - self.start, self.end - self.start)
        return offset, want


def _run_inline(reader: ChunkSource, consumers: Sequence[ChunkConsumer]) -> None:
    buf = reader.buffer()
    view = memoryview(buf)
    while (chunk := reader.read_into(buf)) is not None:
        offset, length = chunk
        piece = view[:length].toreadonly()
        for consumer in consumers:
            consumer.update(offset, piece)


def _run_threaded(reader: ChunkSource, consumers: Sequence[ChunkConsumer], depth: int) -> None:
    """Reader in the calling thread, one worker per consumer, a ring of ``depth`` buffers.

    A buffer goes back to the free list when every consumer has finished with it, so the reader can
    be at most ``depth - 1`` chunks ahead of the slowest consumer: memory stays at depth x chunk.
    """
    buffers = [reader.buffer() for _ in range(max(depth, 2))]
    free: queue.Queue[int] = queue.Queue()
    for index in range(len(buffers)):
        free.put(index)
    pending = [0] * len(buffers)
    lock = threading.Lock()
    errors: list[BaseException] = []
    inboxes: list[queue.Queue[tuple[int, int, int] | None]] = [queue.Queue() for _ in consumers]

    def release(index: int) -> None:
        with lock:
            pending[index] -= 1
            done = pending[index] == 0
        if done:
            free.put(index)

    def work(consumer: ChunkConsumer, inbox: queue.Queue[tuple[int, int, int] | None]) -> None:
        while (item := inbox.get()) is not None:
            index, offset, length = item
            try:
                if not errors:
                    consumer.update(offset, memoryview(buffers[index])[:length].toreadonly())
            except BaseException as err:    # handed to the reader thread, re-raised there
                errors.append(err)
            finally:
                release(index)

    pairs = enumerate(zip(consumers, inboxes, strict=True))
    workers = [threading.Thread(target=work, args=pair, daemon=True, name=f"ggaudit-digest-{i}") for i, pair in pairs]
    for worker in workers:
        worker.start()
    try:
        while True:
            index = free.get()
            if errors:      # a consumer failed: stop reading; its error is re-raised below
                break
            chunk = reader.read_into(buffers[index])
            if chunk is None:
                break
            pending[index] = len(consumers)
            for inbox in inboxes:
                inbox.put((index, *chunk))
    finally:
        for inbox in inboxes:
            inbox.put(None)
        for worker in workers:
            worker.join()
    if errors:
        raise errors[0]


# --- processes --------------------------------------------------------------------------------------

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Have the kernel SIGKILL this process when its parent (``parent_pid``) dies: Linux's
    ``prctl(PR_SET_PDEATHSIG)``. Elsewhere, or if the call fails, nothing: callers also watch the
    parent themselves (``multiprocessing.parent_process().sentinel``), which works everywhere."""
    if not sys.platform.startswith("linux"):
        return
    import signal
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(ctypes.c_int(_PR_SET_PDEATHSIG), ctypes.c_ulong(signal.SIGKILL), ctypes.c_ulong(0),
                   ctypes.c_ulong(0), ctypes.c_ulong(0))
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:      # the parent died before the request took hold
        os._exit(1)


class SigintBlocked:
    """``with SigintBlocked():`` holds back SIGINT in this thread for the block (POSIX
    ``pthread_sigmask``; elsewhere nothing).

    A process started inside the block inherits the mask, through exec too, so Ctrl-C cannot reach it
    before it has chosen its own handler (it then unblocks SIGINT itself). A Ctrl-C during the block
    waits, and is delivered as usual when the block ends."""

    def __init__(self) -> None:
        self._old: set[int] | None = None

    def __enter__(self) -> None:
        import signal
        if hasattr(signal, "pthread_sigmask"):
            self._old = set(signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}))

    def __exit__(self, *exc: object) -> None:
        import signal
        if self._old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._old)


def unblock_sigint() -> None:
    """Undo an inherited :class:`SigintBlocked` in this thread (POSIX; elsewhere nothing)."""
    import signal
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
