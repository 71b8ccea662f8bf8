"""One pass over every byte of a file through one read path, feeding several consumers from the same read.

The read paths are :mod:`ggaudit.rows.readers`' (buffered positioned reads, a read-only mapping copied
out in chunks, direct I/O with its alignment rules); the fan-out to the consumers, each in its own
thread, is :func:`ggaudit.io.feed`. Memory is the ring's few chunks, whatever the file's size: a mapping's
pages are let go once copied out. :func:`beside` runs one pass (check's direct one, which waits on the
device) in a thread of its own while others run. ``scripts/bench_check.py`` measures what this costs.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from .. import io
from ..io import Progress
from ..errors import ReadError
from ..rows.readers import POISON, Buffer, Reader, align_up

#: Bytes per read of a pass through the page cache (a multiple of every direct-I/O alignment there is).
#: Small enough that a chunk stays in the CPU's cache from the read (a copy) through the poison before it and
#: every consumer after it: at 8 MiB the ring no longer fits and each of them goes to main memory instead.
CHUNK_BYTES = 1 << 20
#: Bytes per request of the direct path: its bytes come from the device, not the CPU's cache, and a large
#: request is split by the kernel into several the device serves at once.
DIRECT_CHUNK_BYTES = 8 << 20


_T = TypeVar("_T")
_U = TypeVar("_U")


class PassStopped(Exception):
    """A pass was told to stop before its end: the pass beside it failed or was interrupted."""


@dataclass(frozen=True, kw_only=True)
class PassStats:
    """How one read path read one file: bytes, seconds, the alignment it honoured, and how many reads
    returned fewer bytes than asked before the end of the file (each was read on from where it stopped)."""

    mode: str
    bytes: int
    seconds: float
    alignment: int
    alignment_source: str
    short_reads: int


class ReaderChunks:
    """A read path over ``[0, size)`` as a :class:`ggaudit.io.ChunkSource`: chunks of ``chunk`` bytes read
    into the reader's own buffers (aligned as its path demands), each filled with poison first so bytes a
    read did not deliver cannot pass as the file's. ``stop``, once set, ends the pass at its next chunk."""

    def __init__(self, reader: Reader, size: int, chunk: int = CHUNK_BYTES,
                 stop: threading.Event | None = None) -> None:
        self.reader, self.size, self.pos, self.stop = reader, size, 0, stop
        self.chunk = align_up(chunk, reader.alignment.offset)
        self.buffers: list[Buffer] = []
        self.short_reads = 0

    def buffer(self) -> memoryview:
        found = self.reader.alloc(min(self.chunk, max(align_up(self.size, self.reader.alignment.offset), 1)))
        self.buffers.append(found)
        return found.view

    def read_into(self, buf: memoryview) -> tuple[int, int] | None:
        if self.pos >= self.size:
            return None
        if self.stop is not None and self.stop.is_set():
            raise PassStopped(f"{self.reader.mode} pass stopped at offset {self.pos}")
        want = min(len(buf), self.size - self.pos)
        asked = min(len(buf), align_up(want, self.reader.alignment.offset))
        view = buf[:asked]
        self._poison(buf, asked)
        done = 0
        while done < want:
            got = self.reader.read_into(view[done:], self.pos + done)
            if got <= 0:
                raise ReadError(self.reader.path, f"{self.reader.mode} read: file ended early (it is {self.size} "
                                                  f"bytes; changed while reading?)", offset=self.pos + done)
            done += got
            if done < want:
                self.short_reads += 1
                if done % self.reader.alignment.offset:     # the next aligned read cannot start there
                    raise ReadError(self.reader.path, f"{self.reader.mode} read returned {got} bytes, not a "
                                                      f"multiple of the {self.reader.alignment.offset}-byte "
                                                      "alignment, before the end of the file",
                                    offset=self.pos + done)
        self.reader.done_with(self.pos, want)     # copied out: a mapping's pages need not stay resident
        offset = self.pos
        self.pos += want
        return offset, want

    @staticmethod
    def _poison(buf: memoryview, n: int) -> None:
        # memset, not a copy from a poison block: it only writes, and ctypes releases the GIL meanwhile.
        if n:
            ctypes.memset(io.address_of(buf), POISON, n)

    def close(self) -> None:
        for b in self.buffers:
            b.close()
        self.buffers.clear()


def read_pass(reader: Reader, consumers: Sequence[io.ChunkConsumer], *,
              stop: threading.Event | None = None) -> PassStats:
    """Read every byte of ``reader``'s file once, in order, feeding each chunk to every consumer; ``stop``, once
    set, ends it (PassStopped) at its next chunk."""
    chunk = DIRECT_CHUNK_BYTES if reader.mode == "direct" else CHUNK_BYTES
    chunks = ReaderChunks(reader, reader.size, chunk, stop)
    started = time.perf_counter()
    try:
        io.feed(chunks, consumers)
    finally:
        chunks.close()
    return PassStats(mode=reader.mode, bytes=reader.size, seconds=time.perf_counter() - started,
                     alignment=reader.alignment.offset, alignment_source=reader.alignment.source,
                     short_reads=chunks.short_reads)


def beside(background: Callable[[threading.Event], _T], foreground: Callable[[], _U]) -> tuple[_T, _U]:
    """Run ``background(stop)`` in a thread of its own while ``foreground()`` runs in this one; both results.

    An error of ``foreground`` (Ctrl-C included) sets ``stop``, waits for the background to end at its next
    chunk and propagates; an error of the background is raised once ``foreground`` has succeeded, so the
    first error in the order the work was planned in is the one raised.
    """
    stop = threading.Event()
    results: list[_T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(background(stop))
        except BaseException as err:    # handed to the calling thread, raised there
            errors.append(err)

    thread = threading.Thread(target=run, daemon=True, name="ggaudit-pass-beside")
    thread.start()
    try:
        here = foreground()
        while thread.is_alive():    # a timed join: Ctrl-C reaches this thread meanwhile on Windows too
            thread.join(0.2)
    except BaseException:
        stop.set()
        thread.join()
        raise
    if errors:
        raise errors[0]
    return results[0], here


class PassBytes:
    """A chunk consumer that counts the bytes every pass of a check has read, as one ``progress(done,
    total)``: ``total`` is every file's size once per read path, the passes beside each other (direct and
    the page cache's) adding to one count. A pass skipped (direct I/O refused) counts its bytes done at
    once, so the count still ends at ``total``. Without ``progress`` it is not fed at all (see :meth:`of`)."""

    def __init__(self, progress: Progress, total: int) -> None:
        self._progress, self.total, self.done = progress, total, 0
        self._lock = threading.Lock()
        progress(0, total)

    @staticmethod
    def of(progress: Progress | None, total: int) -> PassBytes | None:
        return None if progress is None else PassBytes(progress, total)

    def update(self, offset: int, data: memoryview) -> None:
        self.skip(len(data))

    def skip(self, nbytes: int) -> None:
        with self._lock:
            self.done = min(self.done + nbytes, self.total)
            self._progress(self.done, self.total)
