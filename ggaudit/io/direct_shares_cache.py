"""Whether direct reads of a file come from the device or, whatever the flag says, from the page cache:
:func:`direct_shares_page_cache` (the filesystem's rules: statfs magic, mount options, statx, file flags,
FIEMAP extents) and :func:`probe_direct_fills_cache` (a test: read uncached pages directly and see whether
they came into the cache). Linux sources for each rule are in direct_shares_page_cache's docstring.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import struct
from collections.abc import Callable, Iterator

from . import opening
from .libc import c_library
from .page_cache import PAGE_SIZE, cache_state
from .system import LINUX, MACOS

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
    own = opening.open_fd(path)
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
    if c_library().fstatfs(fd, buf) != 0:
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
    if c_library().syscall(ctypes.c_long(nr), ctypes.c_long(fd), b"", ctypes.c_long(_AT_EMPTY_PATH),
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
        os.close(opening.open_fd(path, getattr(os, "O_DIRECT", 0)))
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
            direct = opening.open_fd(path, os.O_DIRECT)
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
