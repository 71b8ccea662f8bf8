"""The engine-like reading under `ggaudit rows`: gathers of row batches, a row cache, and the --all sweep.

Nothing here compares or classifies: a gather hands back each row as the read path delivered it, with
what is known about how (the buffer still all poison, a cache hit), and the reads that came back short.
Table geometry comes in as plain integers: the table's absolute offset and its row size.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, NamedTuple

import xxhash

from ..evidence.readers import (PAGE, POISON, Buffer, BufferedReader, FailedRead, Reader, align_down, align_up,
                                is_short, same_bytes)
from .reference_reads import ChunkDigest, chunk_digest

#: Largest single read of a gather (rows sharing pages are merged up to this).
GATHER_READ = 64 << 10
#: Most reads per wave of a gather, and most bytes of their buffers (a wave's buffers are out together).
WAVE = 256
WAVE_BYTES = 16 << 20
#: Bytes per read of the --all sweep: 2 MiB sweeps the Gemma 3 270M token table faster than 8 MiB on every path
#: (a few buffers of it stay in the CPU's caches, and fewer fresh pages are faulted in; scripts/bench_rows.py --table).
SWEEP_CHUNK = 2 << 20
#: How many leading bytes of a buffer are checked for "still all poison".
HEAD = 16


class Sample(NamedTuple):
    """One row as a read path delivered it, with what is known about how (a tuple: made per row, fast)."""

    row: int
    data: bytes | memoryview    # a memoryview only from Gatherer.hold: a view into a still-held read buffer
    unlanded: bool = False      # the read claimed bytes but the buffer's head was still all poison
    via_cache: bool = False     # a cache hit that the ledger cannot vouch for (see through_cache)
    cut: bool = False           # the read holding the row returned fewer bytes than asked
    as_stored: bool = False     # a cache hit returning exactly the bytes its miss stored


class Shortfall(NamedTuple):
    """A read that returned fewer bytes than asked without reaching the end of the file."""

    offset: int
    requested: int
    returned: int


def uniform(data: bytes, value: int) -> bool:
    return bool(data) and data.count(value) == len(data)


def still_poison(view: memoryview, got: int) -> bool:
    """A read that claimed bytes left its buffer's head all poison: the data never landed."""
    return got > 0 and view[0] == POISON and uniform(bytes(view[:HEAD]), POISON)


class BufferPool:
    """Reused read buffers. deque append/pop are atomic, so worker threads share it without a lock."""

    def __init__(self, reader: Reader, size: int) -> None:
        self.reader = reader
        self.size = size
        self.free: deque[Buffer] = deque()
        self.created = 0
        self.all: list[Buffer] = []

    def take(self) -> Buffer:
        try:
            return self.free.pop()
        except IndexError:
            buf = self.reader.alloc(self.size)
            self.created += 1
            self.all.append(buf)
            return buf

    def give(self, buf: Buffer) -> None:
        self.free.append(buf)

    def close(self) -> None:
        for buf in self.all:
            buf.close()
        self.all.clear()
        self.free.clear()


#: Makes a gather's buffer pool from (reader, buffer size); tests pass faulty pools through it.
PoolFactory = Callable[[Reader, int], BufferPool]


class RowCache:
    """An LRU row cache as an engine keeps one; *key* maps a row ID to its cache key."""

    def __init__(self, capacity: int, key: Callable[[int], Any] = lambda row: row) -> None:
        self.capacity = max(1, capacity)
        self.key = key
        self.entries: OrderedDict[Any, bytes] = OrderedDict()
        self.hits = self.misses = self.evictions = 0

    def get(self, row: int) -> bytes | None:
        k = self.key(row)
        data = self.entries.get(k)
        if data is None:
            self.misses += 1
            return None
        self.entries.move_to_end(k)
        self.hits += 1
        return data

    def put(self, row: int, data: bytes) -> None:
        k = self.key(row)
        self.entries[k] = data
        self.entries.move_to_end(k)
        while len(self.entries) > self.capacity:
            self.entries.popitem(last=False)
            self.evictions += 1


class Read(NamedTuple):
    """One read of a gather: bytes [first, end) of the file, holding rows[i:j] of the sorted batch (the
    read path widens it to its own span)."""

    first: int
    end: int
    i: int
    j: int


def plan_reads(base: int, row_bytes: int, rows: list[int], align: int, max_read: int) -> list[Read]:
    """Group *rows* (sorted, distinct) into reads: rows sharing a 4 KiB page (or touching) share one read,
    as long as its aligned span stays within *max_read*."""
    plan: list[Read] = []
    new = tuple.__new__  # skips the NamedTuple constructor's Python frame: a third of the cost per row
    i = 0
    first = last_end = -PAGE
    for j, row in enumerate(rows):
        off = base + row * row_bytes
        if (off > last_end and off // PAGE > (last_end - 1) // PAGE) \
                or align_up(off + row_bytes, align) - align_down(first, align) > max_read:
            if j:
                plan.append(new(Read, (first, last_end, i, j)))
            i, first = j, off
        last_end = off + row_bytes
    if rows:
        plan.append(Read(first, last_end, i, len(rows)))
    return plan


class ReadyWave(NamedTuple):
    """A wave made ready: for each read, a poisoned buffer from the pool, its span (start, length), and
    the job a worker takes: (index, a view of the buffer as long as the span, start)."""

    buffers: list[Buffer]
    spans: list[tuple[int, int]]
    jobs: list[tuple[int, memoryview, int]]


class Held(NamedTuple):
    """A batch gathered zero-copy: each sample's data is a view into one of *buffers*, and those stay out
    of the pool until Gatherer.release, as an engine keeps a batch's buffers while it consumes the rows."""

    samples: list[Sample]
    buffers: list[Buffer]


class Gatherer:
    """Gathers batches of rows through one reader with a thread pool and a reused, poisoned buffer pool.

    A batch is read in waves. The calling thread makes every read of a wave ready (span, buffer, poison),
    the workers do nothing but read, one read after another, and the calling thread then checks the reads
    and copies the rows out. The same work done by a worker between two of its reads costs two to three
    times as much (the worker has just woken from its read, its caches cold), and the worker has no read
    in flight meanwhile. One gather at a time per Gatherer.
    """

    def __init__(self, reader: Reader, base: int, row_bytes: int, workers: int,
                 max_read: int = GATHER_READ, pool_factory: PoolFactory = BufferPool) -> None:
        self.reader = reader
        self.base = base
        self.row_bytes = row_bytes
        self.workers = max(1, workers)
        a = reader.alignment.offset
        self.max_read = max(max_read, align_up(row_bytes, a) + 2 * a)
        self.pool = pool_factory(reader, self.max_read)
        #: Reads per wave: a wave's buffers are out of the pool together, so their bytes are bounded too.
        self.wave = max(self.workers, min(WAVE, WAVE_BYTES // self.max_read))
        self.executor = ThreadPoolExecutor(self.workers) if self.workers > 1 else None
        self.reads = self.bytes = 0
        self.shortfalls: list[Shortfall] = []
        #: Reads that failed (EIO, EAGAIN, ...): their rows are left out of the gather, the others go on.
        self.failures: list[FailedRead] = []

    def gather(self, rows: Iterable[int], held: list[Buffer] | None = None) -> list[Sample]:
        """Each row copied out of its read buffer before the buffer goes back to the pool; or, given
        *held*, left as a view into its buffer, which is appended to *held* instead (see hold).

        Samples come back in row order whichever worker read them, so what follows (a cache's insertion
        order, hence its evictions) is the same on every run.
        """
        batch = sorted(set(rows))
        plan = plan_reads(self.base, self.row_bytes, batch, self.reader.alignment.offset, self.max_read)
        out: list[Sample] = [None] * len(batch)  # type: ignore[list-item]  # every slot gets filled
        failed = len(self.failures)
        for w in range(0, len(plan), self.wave):
            self._wave(batch, plan[w:w + self.wave], out, held)
        return out if len(self.failures) == failed else [s for s in out if s is not None]

    def _prepare(self, reads: list[Read], ready: ReadyWave) -> None:
        """For each read a poisoned buffer from the pool, the span the read path fetches, and the job."""
        span, take = self.reader.span, self.pool.take
        for k, (first, end, _, _) in enumerate(reads):
            start, length = span(first, end - first)
            buf = take()
            ready.buffers.append(buf)
            ready.spans.append((start, length))
            buf.poison(max(length, end - start))  # all the rows are sliced from, even past a short span
            ready.jobs.append((k, buf.view[:length], start))

    def _wave(self, rows: list[int], wave: list[Read], out: list[Sample], held: list[Buffer] | None) -> None:
        ready = ReadyWave([], [], [])
        try:
            self._prepare(wave, ready)
            landed = [0] * len(wave)
            jobs = iter(ready.jobs)
            if self.executor is None or len(wave) < 2:
                self._read(jobs, landed)
            else:
                # The workers share one iterator (its next() is atomic under the GIL): each takes the
                # next read as its last one lands, so none idles while another still has a queue.
                futures = [self.executor.submit(self._read, jobs, landed)
                           for _ in range(min(self.workers, len(wave)))]
                wait(futures)  # all of them, even after one failed: none may still be reading into a buffer
                for f in futures:
                    f.result()
            ready.jobs.clear()  # the views into the buffers go: a buffer closes only once none is left
            self._finish(rows, wave, ready, landed, out, held)
        finally:
            self._return(ready.buffers, held)

    def _read(self, jobs: Iterator[tuple[int, memoryview, int]], landed: list[int]) -> None:
        read_into = self.reader.read_into
        for k, view, start in jobs:
            try:
                landed[k] = read_into(view, start)
            except FailedRead as err:
                landed[k] = -1          # no rows from this read; list.append is atomic across the workers
                self.failures.append(err)

    def _finish(self, rows: list[int], reads: list[Read], ready: ReadyWave, landed: list[int],
                out: list[Sample], held: list[Buffer] | None) -> None:
        """Note short reads and unlanded buffers, and slice each read's rows into *out*."""
        rb, base, size, new = self.row_bytes, self.base, self.reader.size, tuple.__new__
        for (first, _, i, j), buf, (start, length), got in zip(reads, ready.buffers, ready.spans, landed, strict=True):
            if got < 0:
                continue                # the read failed: its rows' slots stay empty (see gather)
            cut = got < length and is_short(start, length, got, size)
            if cut:
                self.shortfalls.append(Shortfall(start, length, got))
            whole = buf.view
            unlanded = still_poison(whole, got)
            at = first - start
            if j == i + 1:
                # Most reads of a random gather hold one row: without the inner loop, 6% less per row
                # (3.4 against 3.6 us page-cached), in the calling thread while no read is in flight.
                data = bytes(whole[at:at + rb]) if held is None else whole[at:at + rb]
                # tuple.__new__ skips the NamedTuple constructor's Python frame: half the cost per row.
                out[i] = new(Sample, (rows[i], data, unlanded, False, cut, False))
                continue
            for k in range(i, j):
                at = base + rows[k] * rb - start
                data = bytes(whole[at:at + rb]) if held is None else whole[at:at + rb]
                out[k] = new(Sample, (rows[k], data, unlanded, False, cut, False))
        self.reads += sum(got >= 0 for got in landed)
        self.bytes += sum(got for got in landed if got > 0)

    def _return(self, buffers: list[Buffer], held: list[Buffer] | None) -> None:
        if held is None:
            for buf in buffers:
                self.pool.give(buf)
        else:
            held.extend(buffers)

    def hold(self, rows: Iterable[int]) -> Held:
        """Gather zero-copy: the rows stay views into buffers kept out of the pool until release."""
        buffers: list[Buffer] = []  # list.append is atomic, so the workers share it without a lock
        return Held(self.gather(rows, buffers), buffers)

    def release(self, held: Held) -> None:
        for s in held.samples:
            if isinstance(s.data, memoryview):
                s.data.release()  # a late reader of a released batch fails loudly instead of reading reuse
        for buf in held.buffers:
            self.pool.give(buf)

    def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown()
        self.pool.close()


class CacheLedger:
    """What each row's cache entry received from its miss, kept beside the cache (which may be faulty), so a
    hit is blamed on the cache only when it returns other bytes than its miss stored. Holds the very bytes
    objects the cache got (no copy), the latest *limit* rows."""

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self.stored: OrderedDict[int, bytes] = OrderedDict()

    def put(self, row: int, data: bytes) -> None:
        self.stored[row] = data
        self.stored.move_to_end(row)
        while len(self.stored) > self.limit:
            self.stored.popitem(last=False)

    def hit(self, row: int, data: bytes) -> Sample:
        """A cache hit for *row*: vouched for when it is what the miss stored, else a suspect for crosstalk."""
        if self.stored.get(row) == data:
            return Sample(row, data, as_stored=True)
        return Sample(row, data, via_cache=True)


def through_cache(gather: Callable[[list[int]], list[Sample]], cache: RowCache, rows: Iterable[int],
                  ledger: CacheLedger) -> list[Sample]:
    """Rows the cache holds come from it (marked, against *ledger*); the rest are gathered and put in it."""
    out, missing = [], []
    for row in rows:
        data = cache.get(row)
        if data is None:
            missing.append(row)
        else:
            out.append(ledger.hit(row, data))
    fresh = gather(missing)
    for s in fresh:
        data = bytes(s.data)  # bytes already: no copy
        cache.put(s.row, data)
        ledger.put(s.row, data)
    return out + fresh


class Chunk(NamedTuple):
    """Rows [first, first + n_rows) of the sweep; the bytes of both sides only when they differ."""

    first: int
    n_rows: int
    actual: bytes | None
    expected: bytes | None
    unlanded: bool
    shortfall: Shortfall | None
    #: The read of the chunk that failed, with the stage it failed in ("sweep": the path's, "reference"): the
    #: chunk was not compared.
    failure: tuple[str, FailedRead] | None = None
    #: The reference read of the chunk made by this path's sweep, if one was (ggaudit.rows.reference_reads).
    reference: ChunkDigest | None = None


class Sweep:
    """The whole table in large sequential aligned reads, a few in flight, each compared in place.

    The table is read once per path. A chunk no earlier path's sweep has a reference read of is read through
    the reference too, beside the path's own read, and compared with it with memcmp; what is kept of that
    reference read is its digests (*first*, by the chunk's first row), so a later path's read of the chunk
    is compared with the first reference read by its xxh3-128, and the reference is read again only where
    they differ: then the path's bytes are compared with that new reference read, which the caller also
    sets against the first (a reference read that changed is said). A clean chunk costs no allocation or
    copy; a differing one is handed back whole for the caller to take apart.
    """

    def __init__(self, reader: Reader, reference: BufferedReader, base: int, row_bytes: int, n_rows: int,
                 workers: int, chunk: int = SWEEP_CHUNK, first: Mapping[int, ChunkDigest] | None = None,
                 threads: ThreadPoolExecutor | None = None) -> None:
        self.reader, self.reference = reader, reference
        self.base, self.row_bytes, self.n_rows = base, row_bytes, n_rows
        self.workers = max(1, workers)
        self.per = max(1, chunk // row_bytes)
        self.first: Mapping[int, ChunkDigest] = first or {}
        #: The threads the reads run in (*threads*, shared by the sweeps of a replay; else the sweep's own).
        self.threads = threads
        a = reader.alignment.offset
        self.pool = BufferPool(reader, align_up(self.per * row_bytes, a) + 2 * a)
        self.ref_pool = BufferPool(reference, self.per * row_bytes)
        self.lock = threading.Lock()
        self.reads = self.bytes = 0

    def chunks(self) -> Generator[Chunk, None, None]:
        """Every chunk in table order; stop early by closing the iterator (in-flight reads finish)."""
        ex = self.threads if self.threads is not None else ThreadPoolExecutor(self.workers)
        pending: deque[Future[Chunk]] = deque()
        try:
            for first in range(0, self.n_rows, self.per):
                pending.append(ex.submit(self._one, first, min(self.per, self.n_rows - first)))
                if len(pending) >= 2 * self.workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            wait(pending)      # none may still be reading into a buffer the pools below close
            if ex is not self.threads:
                ex.shutdown()
            self.pool.close()
            self.ref_pool.close()

    def _one(self, first: int, count: int) -> Chunk:
        off = self.base + first * self.row_bytes
        length = count * self.row_bytes
        start, span = self.reader.span(off, length)
        known = self.first.get(first)
        if known is None:
            # The reference bytes come through the page cache while the path's own read is in flight, so both
            # reads of a chunk reach the disk at once.
            self.reference.will_need(off, length)
        buf = self.pool.take()
        try:
            buf.poison(max(span, off - start + length))
            view = buf.view[:span]
            try:
                got = self.reader.read_into(view, start)
            except FailedRead as err:
                return Chunk(first, count, None, None, False, None, ("sweep", err))
            finally:
                view.release()
            with buf.view[off - start:off - start + length] as actual:
                compared = self._compared(actual, off, known)
            if isinstance(compared, FailedRead):
                return Chunk(first, count, None, None, False, None, ("reference", compared))
            unlanded = still_poison(buf.view, got)
        finally:
            self.pool.give(buf)
        with self.lock:
            self.reads += 1
            self.bytes += got
        short = Shortfall(start, span, got) if is_short(start, span, got, self.reader.size) else None
        sides, reference = compared
        return Chunk(first, count, sides[0], sides[1], unlanded, short, None, reference)

    def _compared(self, actual: memoryview, off: int, known: ChunkDigest | None
                  ) -> tuple[tuple[bytes | None, bytes | None], ChunkDigest | None] | FailedRead:
        """The path's bytes of a chunk against the reference: the first reference read's xxh3-128 where an
        earlier path made it and they agree; else a reference read made now, byte for byte. Both sides' bytes
        where they differ (else None, None), and the digests of the reference read made now, if one was."""
        if known is not None and xxhash.xxh3_128_intdigest(actual) == known.full:
            return (None, None), None
        ref = self.ref_pool.take()
        try:
            with ref.view[:len(actual)] as expected:
                try:
                    self.reference.read_exact_into(expected, off)
                except FailedRead as err:
                    return err
                digest = chunk_digest(expected)
                if same_bytes(actual, expected):
                    return (None, None), digest
                return (bytes(actual), bytes(expected)), digest
        finally:
            self.ref_pool.give(ref)
