"""One pass over every byte of a file through one read path, feeding several consumers from the same read.

The read paths are :mod:`ggaudit.rows.readers`' (buffered positioned reads, a read-only mapping copied
out in chunks, direct I/O with its alignment rules); the fan-out to the consumers, each in its own
thread, is :func:`ggaudit.io.feed`. Memory is the ring's few chunks, whatever the file's size.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from .. import io
from ..errors import ReadError
from ..rows.readers import Buffer, Reader, align_up

#: Bytes per read of a pass (a multiple of every direct-I/O alignment there is).
CHUNK_BYTES = 8 << 20


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
    read did not deliver cannot pass as the file's."""

    def __init__(self, reader: Reader, size: int, chunk: int = CHUNK_BYTES) -> None:
        self.reader, self.size, self.pos = reader, size, 0
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
        offset = self.pos
        self.pos += want
        return offset, want

    def _poison(self, buf: memoryview, n: int) -> None:
        for b in self.buffers:
            if b.view is buf:
                b.poison(n)
                return

    def close(self) -> None:
        for b in self.buffers:
            b.close()
        self.buffers.clear()


def read_pass(reader: Reader, consumers: Sequence[io.ChunkConsumer]) -> PassStats:
    """Read every byte of ``reader``'s file once, in order, feeding each chunk to every consumer."""
    chunks = ReaderChunks(reader, reader.size)
    started = time.perf_counter()
    try:
        io.feed(chunks, consumers)
    finally:
        chunks.close()
    return PassStats(mode=reader.mode, bytes=reader.size, seconds=time.perf_counter() - started,
                     alignment=reader.alignment.offset, alignment_source=reader.alignment.source,
                     short_reads=chunks.short_reads)
