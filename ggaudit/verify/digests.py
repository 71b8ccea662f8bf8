"""Streaming digests: read a file once, in large chunks, and feed every interested consumer.

The unit of reuse is the *chunk consumer*: any object with ``update(offset, data)``. A consumer is
handed the bytes of a file in order, chunk after chunk, each chunk as a read-only ``memoryview`` and
the absolute file ``offset`` of its first byte. ``read_through`` is the driver: it reads the file once
with positioned reads (:mod:`ggaudit.io`) into a small ring of reused buffers and gives every chunk to
every consumer, so a sha256 of the file, per-tensor xxh3 digests and a NaN scan can all share one read::

    sha = Sha256()
    read_through(path, [sha, my_scanner])      # one pass over the file
    sha.hexdigest()

Rules for consumers:

* chunks arrive in file order, back to back, covering ``[start, end)`` exactly once;
* the ``memoryview`` is only valid during the call: the buffer is refilled afterwards, so copy what
  you must keep (``bytes(data[a:b])``);
* each consumer runs in its own worker thread (``threaded=True``, the default), one chunk at a time,
  so a consumer needs no locking of its own; the work that releases the GIL (``hashlib`` for large
  updates, ``xxhash``, numpy) then runs in parallel with the next read and with the other consumers.
  Light consumers can be bundled into one thread with ``Tee``;
* an exception raised by a consumer stops the read and is re-raised by ``read_through``.

``progress(done, total)``, where a function takes it, is told bytes done of bytes to do, once per chunk
(never per byte), in the calling thread; :class:`Tally` adds several reads up into one such count.
"""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import threading
from dataclasses import dataclass
from typing import Any, Protocol
from collections.abc import Callable, Iterable, Sequence

import xxhash

from .. import io
from ..errors import ReadError, UsageError, one_or_many

log = logging.getLogger(__name__)

DEFAULT_CHUNK_SIZE = 8 << 20
"""Bytes per read: large enough that per-chunk Python overhead vanishes, small enough to stay cheap."""

DEFAULT_DEPTH = 3
"""Buffers in the ring: one being read while the consumers work on the others."""

#: Told (bytes done, bytes in all) as a long read advances.
Progress = Callable[[int, int], None]


class ChunkConsumer(Protocol):
    """Anything that accepts a file's bytes chunk by chunk (see the module docstring)."""

    def update(self, offset: int, data: memoryview) -> None:
        """Take the bytes ``data`` found at absolute file offset ``offset``; do not keep ``data``."""


class _Hasher:
    """A hashlib-style object (``update``, ``hexdigest``) as a chunk consumer."""

    name: str

    def __init__(self, hash_object: Any) -> None:
        self._hash = hash_object

    def update(self, offset: int, data: memoryview) -> None:
        self._hash.update(data)

    def hexdigest(self) -> str:
        return str(self._hash.hexdigest())


class Sha256(_Hasher):
    """sha256 of everything it is fed, as a chunk consumer."""

    name = "sha256"

    def __init__(self) -> None:
        super().__init__(hashlib.sha256())


class Xxh3_128(_Hasher):
    """xxh3-128 of everything it is fed, as a chunk consumer."""

    name = "xxh3-128"

    def __init__(self) -> None:
        super().__init__(xxhash.xxh3_128())


class GitBlobSha1(_Hasher):
    """git's blob id (sha1 of ``blob <size>\\0`` then the bytes), as the Hugging Face cache names small files."""

    name = "git-sha1"

    def __init__(self, size: int) -> None:
        super().__init__(hashlib.sha1(b"blob %d\0" % size))


ALGORITHMS: dict[str, Callable[[], Sha256 | Xxh3_128]] = {"sha256": Sha256, "xxh3-128": Xxh3_128}


class Tee:
    """Several light consumers that share one worker thread, called in the order given."""

    def __init__(self, consumers: Sequence[ChunkConsumer]) -> None:
        self.consumers = tuple(consumers)

    def update(self, offset: int, data: memoryview) -> None:
        for consumer in self.consumers:
            consumer.update(offset, data)


@dataclass(frozen=True)
class Segment:
    """A byte range of a file to digest on its own, cut into groups of ``group_bytes`` each.

    ``group_bytes`` must divide the segment's natural units (callers pass a whole number of rows);
    the last group may be shorter.
    """

    key: str
    offset: int
    length: int
    group_bytes: int


@dataclass(frozen=True)
class SegmentDigest:
    key: str
    digest: str                 # xxh3-128 hex of the whole segment
    groups: tuple[str, ...]     # xxh3-128 hex of each group, in order


class SegmentDigests:
    """xxh3-128 of each of several byte ranges, and of fixed-size groups inside each, in one pass.

    Segments may appear in any order and may overlap (each is hashed on its own); bytes outside every
    segment are skipped. Digests are available from ``results()`` once the whole file has been fed.
    """

    name = "segments"

    def __init__(self, segments: Iterable[Segment]) -> None:
        self._segments = sorted(segments, key=lambda s: (s.offset, s.length))
        for seg in self._segments:
            if seg.length < 0 or seg.offset < 0 or seg.group_bytes <= 0:
                raise ValueError(f"bad segment {seg}")
        self._next = 0                        # first segment not yet started
        self._open: list[_OpenSegment] = []   # segments overlapping the current position
        # A zero-length segment never overlaps a chunk: its digests are those of no bytes.
        self._done = {s.key: _OpenSegment(s).result() for s in self._segments if s.length == 0}

    def update(self, offset: int, data: memoryview) -> None:
        end = offset + len(data)
        while self._next < len(self._segments) and self._segments[self._next].offset < end:
            planned = self._segments[self._next]
            if planned.length:
                self._open.append(_OpenSegment(planned))
            self._next += 1
        still_open = []
        for seg in self._open:
            seg.feed(offset, data)
            if seg.finished:
                self._done[seg.segment.key] = seg.result()
            else:
                still_open.append(seg)
        self._open = still_open

    def results(self) -> dict[str, SegmentDigest]:
        """Digests by segment key; raises ReadError if the feed ended before a segment did."""
        missing = [s for s in self._segments if s.key not in self._done]
        if missing:
            seg = missing[0]
            raise ReadError(None, f"data of {seg.key} was not read to its end",
                            offset=seg.offset + seg.length)
        return dict(self._done)


class _OpenSegment:
    def __init__(self, segment: Segment) -> None:
        self.segment = segment
        self._whole = xxhash.xxh3_128()
        self._group = xxhash.xxh3_128()
        self._group_fill = 0
        self._groups: list[str] = []
        self._pos = segment.offset            # next byte of the segment still to hash

    @property
    def finished(self) -> bool:
        return self._pos >= self.segment.offset + self.segment.length

    def feed(self, offset: int, data: memoryview) -> None:
        seg_end = self.segment.offset + self.segment.length
        lo = max(self._pos, offset)
        hi = min(seg_end, offset + len(data))
        if hi <= lo:
            return
        piece = data[lo - offset:hi - offset]
        self._whole.update(piece)
        self._pos = hi
        while len(piece):
            take = min(len(piece), self.segment.group_bytes - self._group_fill)
            self._group.update(piece[:take])
            self._group_fill += take
            piece = piece[take:]
            if self._group_fill == self.segment.group_bytes:
                self._close_group()

    def _close_group(self) -> None:
        self._groups.append(self._group.hexdigest())
        self._group.reset()
        self._group_fill = 0

    def result(self) -> SegmentDigest:
        if self._group_fill:
            self._close_group()
        return SegmentDigest(self.segment.key, self._whole.hexdigest(), tuple(self._groups))


def read_through(path: str | os.PathLike[str], consumers: Sequence[ChunkConsumer], *,
                 start: int = 0, end: int | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE,
                 depth: int = DEFAULT_DEPTH, threaded: bool = True, progress: Progress | None = None) -> int:
    """Read ``path`` once from ``start`` to ``end`` (default: its size) and feed every consumer.

    Returns the number of bytes read. Raises ReadError if the file ends early (it shrank, or ``end``
    lies past its end) or a read fails; OSError from opening propagates for the caller to report.
    With ``threaded=False`` everything runs in the calling thread (simpler to debug, slower).
    ``progress(done, total)``: bytes of ``[start, end)`` read so far, after each chunk.
    """
    fd = io.open_fd(path)
    try:
        if end is None:
            end = os.fstat(fd).st_size
        if not 0 <= start <= end:
            raise ValueError(f"bad range [{start}, {end})")
        io.advise(fd, start, end - start, "sequential")
        reader = _ChunkReader(fd, os.fspath(path), start, end, chunk_size, progress)
        if threaded and consumers:
            _run_threaded(reader, consumers, depth)
        else:
            _run_inline(reader, consumers)
        return end - start
    finally:
        os.close(fd)


def hash_file(path: str | os.PathLike[str], algorithms: str | Sequence[str] = ("sha256",), *,
              chunk_size: int = DEFAULT_CHUNK_SIZE, progress: Progress | None = None) -> dict[str, str]:
    """Hex digests of a whole file for each named algorithm (``sha256``, ``xxh3-128``; a str is one), one read."""
    algorithms = one_or_many("algorithms", algorithms)
    unknown = [name for name in algorithms if name not in ALGORITHMS]
    if unknown:
        raise UsageError(path, f"unknown digest algorithm {unknown[0]!r} (known: {', '.join(ALGORITHMS)})")
    hashers = [ALGORITHMS[name]() for name in algorithms]
    read_through(path, hashers, chunk_size=chunk_size, progress=progress)
    return {name: h.hexdigest() for name, h in zip(algorithms, hashers, strict=True)}


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
        io.pread_exact(self.fd, self.path, memoryview(buf)[:want], self.pos)
        offset = self.pos
        self.pos += want
        if self.progress is not None:
            self.progress(self.pos - self.start, self.end - self.start)
        return offset, want


class Tally:
    """Several reads told as one ``progress(done, total)``: ``total`` bytes planned in all, each read's
    progress (:meth:`part`) added to what the reads before it did, and bytes that need no read (a digest
    taken from the cache, a file not read) counted done at once (:meth:`skip`). Without ``progress`` it
    does nothing; its count is clamped to ``total``, so a plan that was short never overshoots."""

    def __init__(self, progress: Progress | None, total: int = 0) -> None:
        self._progress, self.total, self.done = progress, total, 0

    @property
    def active(self) -> bool:
        """Whether anyone is told: planning is work only worth doing then."""
        return self._progress is not None

    def plan(self, total: int) -> None:
        """Set the bytes planned, and say so (0 done) before the first read."""
        self.total = total
        self._tell(0)

    def part(self) -> Progress | None:
        """The progress callback of the next read: its bytes are added to the count."""
        if self._progress is None:
            return None
        base = self.done

        def told(done: int, _total: int) -> None:
            self._tell(base + done)

        return told

    def skip(self, nbytes: int) -> None:
        """Count ``nbytes`` done without reading them."""
        if self._progress is not None:
            self._tell(self.done + nbytes)

    def _tell(self, done: int) -> None:
        if self._progress is not None:
            self.done = min(done, self.total)
            self._progress(self.done, self.total)


def _run_inline(reader: _ChunkReader, consumers: Sequence[ChunkConsumer]) -> None:
    buf = reader.buffer()
    view = memoryview(buf)
    while (chunk := reader.read_into(buf)) is not None:
        offset, length = chunk
        piece = view[:length].toreadonly()
        for consumer in consumers:
            consumer.update(offset, piece)


def _run_threaded(reader: _ChunkReader, consumers: Sequence[ChunkConsumer], depth: int) -> None:
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
