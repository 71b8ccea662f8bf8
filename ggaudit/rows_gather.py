"""The engine-like reading under `ggaudit rows`: gathers of row batches, a row cache, and the --all sweep.

Nothing here compares or classifies: a gather hands back each row as the read path delivered it, with
what is known about how (the buffer still all poison, a cache hit), and the reads that came back short.
Table geometry comes in as plain integers: the table's absolute offset and its row size.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterable, Iterator, NamedTuple

from .readers import PAGE, POISON, Buffer, BufferedReader, Reader, align_down, align_up, is_short, same_bytes

#: Largest single read of a gather (rows sharing pages are merged up to this).
GATHER_READ = 256 << 10
#: Bytes per read of the --all sweep.
SWEEP_CHUNK = 8 << 20
#: How many leading bytes of a buffer are checked for "still all poison".
HEAD = 16


class Sample(NamedTuple):
    """One row as a read path delivered it, with what is known about how (a tuple: made per row, fast)."""

    row: int
    data: bytes | memoryview    # a memoryview only from Gatherer.hold: a view into a still-held read buffer
    unlanded: bool = False      # the read claimed bytes but the buffer's head was still all poison
    via_cache: bool = False


class Shortfall(NamedTuple):
    """A read that returned fewer bytes than asked without reaching the end of the file."""

    offset: int
    requested: int
    returned: int


def uniform(data: bytes, value: int) -> bool:
    return bool(data) and data.count(value) == len(data)


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


class PlannedRead(NamedTuple):
    start: int
    length: int
    rows: tuple[int, ...]


def plan_reads(reader: Reader, base: int, row_bytes: int, rows: Iterable[int], max_read: int) -> list[PlannedRead]:
    """Group rows sorted by offset into reads: rows sharing a 4 KiB page (or touching) share one read."""
    plan: list[PlannedRead] = []
    group: list[int] = []
    first = last_end = 0
    a = reader.alignment.offset
    for row in sorted(set(rows)):
        off = base + row * row_bytes
        end = off + row_bytes
        if group and (off <= last_end or off // PAGE <= (last_end - 1) // PAGE) \
                and align_up(end, a) - align_down(first, a) <= max_read:
            group.append(row)
            last_end = end
            continue
        if group:
            plan.append(PlannedRead(*reader.span(first, last_end - first), tuple(group)))
        group, first, last_end = [row], off, end
    if group:
        plan.append(PlannedRead(*reader.span(first, last_end - first), tuple(group)))
    return plan


class Held(NamedTuple):
    """A batch gathered zero-copy: each sample's data is a view into one of *buffers*, and those stay out
    of the pool until Gatherer.release, as an engine keeps a batch's buffers while it consumes the rows."""

    samples: list[Sample]
    buffers: list[Buffer]


class Gatherer:
    """Gathers batches of rows through one reader with a thread pool and a reused, poisoned buffer pool."""

    def __init__(self, reader: Reader, base: int, row_bytes: int, workers: int,
                 max_read: int = GATHER_READ, pool_factory: PoolFactory = BufferPool) -> None:
        self.reader = reader
        self.base = base
        self.row_bytes = row_bytes
        self.workers = max(1, workers)
        a = reader.alignment.offset
        self.max_read = max(max_read, align_up(row_bytes, a) + 2 * a)
        self.pool = pool_factory(reader, self.max_read)
        self.executor = ThreadPoolExecutor(self.workers) if self.workers > 1 else None
        self.lock = threading.Lock()
        self.reads = self.bytes = 0
        self.shortfalls: list[Shortfall] = []

    def gather(self, rows: Iterable[int], held: list[Buffer] | None = None) -> list[Sample]:
        """Each row copied out of its read buffer before the buffer goes back to the pool; or, given
        *held*, left as a view into its buffer, which is appended to *held* instead (see hold)."""
        plan = plan_reads(self.reader, self.base, self.row_bytes, rows, self.max_read)
        if self.executor is None or len(plan) < 2:
            return self._run(plan, held)
        # Workers pull the next read from one shared iterator (its next() is atomic under the GIL), so
        # none sits idle while another still has a queue: the batch ends when the last read lands.
        # Samples come back in row order whichever worker read them, so what follows (a cache's
        # insertion order, hence its evictions) is the same on every run.
        shared = iter(plan)
        futures = [self.executor.submit(self._run, shared, held) for _ in range(min(self.workers, len(plan)))]
        return sorted((sample for f in futures for sample in f.result()), key=lambda s: s.row)

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

    def _run(self, plan: Iterable[PlannedRead], held: list[Buffer] | None = None) -> list[Sample]:
        out: list[Sample] = []
        rb, base = self.row_bytes, self.base
        read_into, size = self.reader.read_into, self.reader.size
        done = n_reads = 0
        for rd in plan:
            n_reads += 1
            buf = self.pool.take()
            try:
                # Poison all the rows will be sliced from, even past a (wrongly) short span. This read step
                # mirrors Sweep._one but stays inline: it runs once per read, and a shared helper costs 2-4%
                # of a page-cached gather.
                buf.poison(max(rd.length, base + rd.rows[-1] * rb + rb - rd.start))
                view = buf.view[:rd.length]
                got = read_into(view, rd.start)
                view.release()
                done += got
                if got < rd.length and is_short(rd.start, rd.length, got, size):
                    self.shortfalls.append(Shortfall(rd.start, rd.length, got))
                whole = buf.view
                unlanded = got > 0 and whole[0] == POISON and uniform(bytes(whole[:HEAD]), POISON)
                for row in rd.rows:
                    at = base + row * rb - rd.start
                    out.append(Sample(row, bytes(whole[at:at + rb]) if held is None else whole[at:at + rb],
                                      unlanded))
            finally:
                if held is None:
                    self.pool.give(buf)
                else:
                    held.append(buf)
        with self.lock:
            self.reads += n_reads
            self.bytes += done
        return out

    def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown()
        self.pool.close()


def through_cache(gather: Callable[[list[int]], list[Sample]], cache: RowCache, rows: Iterable[int]) -> list[Sample]:
    """Rows the cache holds come from it (marked); the rest are gathered and put in it."""
    out, missing = [], []
    for row in rows:
        data = cache.get(row)
        if data is None:
            missing.append(row)
        else:
            out.append(Sample(row, data, via_cache=True))
    fresh = gather(missing)
    for s in fresh:
        cache.put(s.row, s.data)
    return out + fresh


class Chunk(NamedTuple):
    """Rows [first, first + count) of the sweep; the bytes of both sides only when they differ."""

    first: int
    count: int
    actual: bytes | None
    expected: bytes | None
    unlanded: bool
    shortfall: Shortfall | None


class Sweep:
    """The whole table in large sequential aligned reads, a few in flight, each compared in place.

    The path's chunk and the reference's land in pooled buffers and are compared with memcmp, so a clean
    chunk costs no allocation or copy; a differing one is handed back whole for the caller to take apart.
    """

    def __init__(self, reader: Reader, reference: BufferedReader, base: int, row_bytes: int, n_rows: int,
                 workers: int, chunk: int = SWEEP_CHUNK) -> None:
        self.reader, self.reference = reader, reference
        self.base, self.row_bytes, self.n_rows = base, row_bytes, n_rows
        self.workers = max(1, workers)
        self.per = max(1, chunk // row_bytes)
        a = reader.alignment.offset
        self.pool = BufferPool(reader, align_up(self.per * row_bytes, a) + 2 * a)
        self.ref_pool = BufferPool(reference, self.per * row_bytes)
        self.lock = threading.Lock()
        self.reads = self.bytes = 0

    def chunks(self) -> Iterator[Chunk]:
        """Every chunk in table order; stop early by closing the iterator (in-flight reads finish)."""
        try:
            with ThreadPoolExecutor(self.workers) as ex:
                pending: deque[Future[Chunk]] = deque()
                for first in range(0, self.n_rows, self.per):
                    pending.append(ex.submit(self._one, first, min(self.per, self.n_rows - first)))
                    if len(pending) >= 2 * self.workers:
                        yield pending.popleft().result()
                while pending:
                    yield pending.popleft().result()
        finally:
            self.pool.close()
            self.ref_pool.close()

    def _one(self, first: int, count: int) -> Chunk:
        off = self.base + first * self.row_bytes
        length = count * self.row_bytes
        start, span = self.reader.span(off, length)
        buf, ref = self.pool.take(), self.ref_pool.take()
        try:
            buf.poison(max(span, off - start + length))
            view = buf.view[:span]
            got = self.reader.read_into(view, start)
            view.release()
            self.reference.read_exact_into(ref.view[:length], off)
            actual, expected = buf.view[off - start:off - start + length], ref.view[:length]
            same = same_bytes(actual, expected)
            unlanded = got > 0 and uniform(bytes(buf.view[:HEAD]), POISON)
            sides = (None, None) if same else (bytes(actual), bytes(expected))
            actual.release()
            expected.release()
        finally:
            self.pool.give(buf)
            self.ref_pool.give(ref)
        with self.lock:
            self.reads += 1
            self.bytes += got
        short = Shortfall(start, span, got) if is_short(start, span, got, self.reader.size) else None
        return Chunk(first, count, *sides, unlanded, short)
