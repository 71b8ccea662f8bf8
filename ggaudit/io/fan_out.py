"""One read of a file feeding many consumers: :func:`read_through` (a buffered read) and :func:`feed` (any
read path), each consumer in its own thread over a small ring of reused buffers, so a sha256, per-tensor
digests and a scan share one read pass without importing one another.

A *chunk consumer* is any object with ``update(offset, data)``: it is handed the bytes of a file in
order, chunk after chunk, each as a read-only ``memoryview`` with the absolute file ``offset`` of its
first byte. :func:`read_through` reads the file once into a small ring of reused buffers and gives every
chunk to every consumer, so a sha256 of the file, per-tensor digests and a NaN scan share one read::

    sha = Sha256()                             # ggaudit.io.hashing
    read_through(path, [sha, my_scanner])      # one pass over the file
    sha.hexdigest()

Rules for consumers: chunks arrive in file order, back to back, covering ``[start, end)`` exactly once;
the ``memoryview`` is only valid during the call (the buffer is refilled afterwards: copy what you keep);
each consumer runs in its own worker thread (``threaded=True``, the default), one chunk at a time, so it
needs no locking of its own and the work that releases the GIL (hashlib, xxhash, numpy) overlaps the next
read; an exception raised by a consumer stops the read and is re-raised by ``read_through``.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from . import opening
from .advice import advise
from .positioned import pread_exact

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
    fd = opening.open_fd(path)
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
