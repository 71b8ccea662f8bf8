"""The page cache of one file: what is cached (:func:`cache_state`) and dropping it (:func:`evict`).

Buffered and mmap reads come from the page cache, direct reads from the device. When they disagree, the
test is to drop the file's clean pages and read again through the cache: bytes that now match the device
were the device's all along (a lost write under a still-cached file); bytes that still match the old cache
say the direct path is the one that is wrong. These functions are that test's OS layer; whether a direct read
is independent of the cache at all is :mod:`ggaudit.io.direct_shares_cache`'s.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from .libc import c_library, os_error
from .system import LINUX, MACOS, WINDOWS

PAGE_SIZE = mmap.PAGESIZE

_SYS_CACHESTAT = 451            # the same number on every architecture: the unified syscall table (Linux 6.5)
_PROT_NONE, _MAP_SHARED = 0, 1  # the same values on Linux and macOS
_MS_INVALIDATE = 2              # macOS <sys/mman.h>
_MINCORE_WINDOW = 1 << 30       # bytes mapped at once: bounds the address space and the residency vector
_CAP_FOWNER = 3


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
    libc = c_library()
    if libc.syscall(ctypes.c_long(_SYS_CACHESTAT), ctypes.c_long(fd), ctypes.byref(rng), ctypes.byref(out),
                    ctypes.c_long(0)) == 0:
        return out.nr_cache, out.nr_dirty + out.nr_writeback
    if ctypes.get_errno() in (errno.ENOSYS, errno.EPERM):
        return None
    raise os_error("cachestat")


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
        if c_library().mincore(addr, n * PAGE_SIZE, vec) != 0:
            raise os_error("mincore")
        cached += vec.raw[:n].translate(_LOW_BIT).count(1)
    return cached


def _windows(fd: int, first: int, pages: int, what: str) -> Iterator[tuple[int, int]]:
    """PROT_NONE shared mappings of ``pages`` pages of ``fd`` from page ``first``, a window at a time: (address,
    pages); each is unmapped once the caller is done with it."""
    libc, window = c_library(), _MINCORE_WINDOW // PAGE_SIZE
    for start in range(first, first + pages, window):
        n = min(window, first + pages - start)
        addr = libc.ggaudit_mmap(None, n * PAGE_SIZE, _PROT_NONE, _MAP_SHARED, fd, start * PAGE_SIZE)
        if addr is None or addr == ctypes.c_void_p(-1).value:
            raise os_error(f"mmap for {what}")
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
        if c_library().msync(addr, n * PAGE_SIZE, _MS_INVALIDATE) != 0:
            raise os_error("msync(MS_INVALIDATE)")
