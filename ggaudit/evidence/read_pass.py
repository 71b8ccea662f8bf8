"""One pass over every byte of a file through one read path (:mod:`ggaudit.evidence.readers`: buffered positioned
reads, a read-only mapping copied out in chunks, direct I/O with its alignment rules), feeding consumers
through :func:`ggaudit.io.fan_out.feed`. Memory is the ring's few chunks, whatever the file's size: a mapping's pages
are let go once copied out. ``check`` reads every file this way on every path; ``rows`` when a published
digest decides which path delivered a row's right bytes."""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..io import fan_out, positioned
from ..errors import ReadError
from .paths import CACHE_CHUNK_BYTES, read_path
from .readers import POISON, Buffer, FailedRead, Reader, align_up

__all__ = ["PassStats", "PassStopped", "ReaderChunks", "read_pass"]

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
    """A read path over ``[0, size)`` as a :class:`ggaudit.io.fan_out.ChunkSource`: chunks of ``chunk`` bytes read
    into the reader's own buffers (aligned as its path demands), each filled with poison first so bytes a
    read did not deliver cannot pass as the file's. ``stop``, once set, ends the pass at its next chunk."""

    def __init__(self, reader: Reader, size: int, chunk: int = CACHE_CHUNK_BYTES,
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
                raise self._ended(self.pos + done)
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

    def _ended(self, offset: int) -> ReadError:
        """A read that returned nothing before the end: the file changed, or (its size the same) the read path
        stopped short below ggaudit."""
        try:
            now = os.stat(self.reader.path).st_size
        except OSError:
            now = None
        if now == self.size:
            return FailedRead(self.reader.path, f"{self.reader.mode} read returned no bytes before the end of the "
                                                f"file (it is still {self.size} bytes): the read stopped short below "
                                                "ggaudit", offset=offset, mode=self.reader.mode,
                              length=self.size - offset)
        return ReadError(self.reader.path, f"{self.reader.mode} read: file ended early (it is {self.size} bytes; "
                                           "changed while reading?)", offset=offset)

    @staticmethod
    def _poison(buf: memoryview, n: int) -> None:
        # memset, not a copy from a poison block: it only writes, and ctypes releases the GIL meanwhile.
        if n:
            ctypes.memset(positioned.address_of(buf), POISON, n)

    def close(self) -> None:
        for b in self.buffers:
            b.close()
        self.buffers.clear()


def read_pass(reader: Reader, consumers: Sequence[fan_out.ChunkConsumer], *,
              stop: threading.Event | None = None) -> PassStats:
    """Read every byte of ``reader``'s file once, in order, feeding each chunk to every consumer; ``stop``, once
    set, ends it (PassStopped) at its next chunk."""
    chunk = read_path(reader.mode).chunk_bytes
    chunks = ReaderChunks(reader, reader.size, chunk, stop)
    started = time.perf_counter()
    try:
        fan_out.feed(chunks, consumers)
    finally:
        chunks.close()
    return PassStats(mode=reader.mode, bytes=reader.size, seconds=time.perf_counter() - started,
                     alignment=reader.alignment.offset, alignment_source=reader.alignment.source,
                     short_reads=chunks.short_reads)
