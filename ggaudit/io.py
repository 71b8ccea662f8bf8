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
import hashlib
import mmap
import os
import queue
import stat
import sys
import threading
from dataclasses import dataclass
from typing import Any, Protocol
from collections.abc import Callable, Sequence

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
    """What tells us a file was replaced or resized between opening and reading it."""

    device: int
    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileIdentity:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    @classmethod
    def now(cls, path: str | os.PathLike[str], when: str) -> FileIdentity:
        """The identity of *path* now; a file gone since is a ReadError "file changed *when*"."""
        try:
            return cls.of(os.stat(path))
        except OSError as err:
            raise ReadError(path, f"file changed {when}: {err.strerror}") from None

    def same_file(self, st: os.stat_result) -> bool:
        return (st.st_dev, st.st_ino) == (self.device, self.inode)

    def check(self, path: str | os.PathLike[str], when: str) -> None:
        """Raise ReadError if *path* is no longer this file: an answer about bytes that are no longer
        there would be silently wrong, so callers check before reporting what they read."""
        now = FileIdentity.now(path, when)
        if now != self:
            raise ReadError(path, f"file changed {when} (replaced, resized or rewritten: size {self.size} -> "
                            f"{now.size}, mtime {self.mtime_ns} -> {now.mtime_ns})")


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
