"""Find NaN, Inf and outliers in every tensor of a model, at the level of stored bits, located exactly.

What is read (facts in :mod:`ggaudit.blocks`):

* float tensors (F32, F16, BF16, F64): every element;
* block-quantized tensors: only the float fields of each block (scales and mins), through a strided
  view, because a block decodes to ``scale x small integer (+ min)`` and so is non-finite exactly when
  one of its fields is. The one exception is MXFP4, whose finite E8M0 scales 0xFD and 0xFE (2^126,
  2^127) overflow float32 when multiplied by the larger E2M1 values: those rare blocks are decoded
  with ``gguf.quants`` and reported as ``overflow`` when they decode to Inf;
* integer tensors: nothing, unless the caller says an I8 tensor holds FP8 E4M3 bytes.

Every test is done on integer keys (the bits with the sign cleared, which order like |x|): one
``bitwise_and`` and one ``max`` per slice decide whether a slice holds anything to report, and only
such slices take the slow path that locates and classifies values.

Two ways to get the bytes share that core (:func:`_scan_units`):

* mapped (large models): worker processes map a window of the file per task and read the fields in
  place, never copying the quantized data. A file that shrinks under a mapping raises SIGBUS, which
  kills only the worker; the pool's breakage becomes ``ReadError("file changed during scan")``.
* streamed (small models): :class:`ScanConsumer` is a chunk consumer for
  :func:`ggaudit.digests.read_through`, so a scan can share one read pass with digest consumers.
"""

from __future__ import annotations

import fnmatch
import functools
import logging
import math
import mmap
import multiprocessing
import os
import time
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Callable, Collection, Iterable, Iterator, Sequence

import numpy as np
import gguf.quants
from gguf import GGMLQuantizationType as T

from .blocks import FP8_E4M3_ELEMENTS, BlockLayout, Encoding, FloatField, decode_bits, iq1m_assemble, layout_of
from .digests import read_through
from .errors import ReadError, UsageError
from .layout import FileIdentity, GGUFFile, Model, Tensor, open_model
from .report import (CAUSE_DECODED, CAUSE_FIELD, CAUSE_OVERFLOW, CHECK_ELEMENTS, CHECK_FIELDS, CHECK_NONE,
                     KINDS, Finding, ScanReport, ScanStats, TensorScan, hex_bits)

log = logging.getLogger(__name__)

#: Raw bytes of float elements examined per numpy step: the key buffer (``out=``) stays in cache.
SLICE_BYTES = 1 << 20
#: Raw bytes of quantized blocks per step: only a few bytes per block are gathered, so more fit.
BLOCK_SLICE_BYTES = 4 << 20
#: Bytes per read when the calling process streams the file (small models).
STREAM_CHUNK_BYTES = 8 << 20
#: Raw bytes a worker maps and scans per task.
TASK_BYTES = 64 << 20
#: Raw bytes decoded per gguf.quants call in --deep mode (decoded floats are ~20x larger).
DEEP_BYTES = 64 << 10
#: Below this much tensor data a scan reads in the calling process: worker start-up would dominate.
AUTO_WORKERS_MIN_BYTES = 64 << 20
#: Tasks queued per worker, so workers never wait for the parent and memory stays bounded.
_QUEUE_PER_WORKER = 2

ProgressCallback = Callable[[int, int], None]


class _Stopped(Exception):
    """Raised by the streamed path to end the read at the first finding (--fail-fast)."""


# ----- codecs: integer keys that order like |x| ---------------------------------------------------

@dataclass(frozen=True)
class _Codec:
    encoding: Encoding
    unit: str            # numpy dtype of one stored unit ('<u2' ...); IQ1_M: one of its 4 words
    mask: int            # key = raw & mask (sign bit cleared)
    inf_key: int         # keys >= inf_key are non-finite (NaN, +Inf, -Inf)


_CODECS: dict[Encoding, _Codec] = {
    Encoding.F16: _Codec(Encoding.F16, "<u2", 0x7FFF, 0x7C00),
    Encoding.IQ1M_F16: _Codec(Encoding.IQ1M_F16, "<u2", 0x7FFF, 0x7C00),
    Encoding.BF16: _Codec(Encoding.BF16, "<u2", 0x7FFF, 0x7F80),
    Encoding.F32: _Codec(Encoding.F32, "<u4", 0x7FFF_FFFF, 0x7F80_0000),
    Encoding.F64: _Codec(Encoding.F64, "<u8", 0x7FFF_FFFF_FFFF_FFFF, 0x7FF0_0000_0000_0000),
    Encoding.E8M0: _Codec(Encoding.E8M0, "u1", 0xFF, 0xFF),      # no sign; 0xFF is NaN
    Encoding.E4M3: _Codec(Encoding.E4M3, "u1", 0x7F, 0x7F),      # 0x7F/0xFF are NaN, no Inf
    # As ggml and gguf decode it, bit 7 is ignored and 0x7F means zero: no byte is non-finite, and the
    # key is a rank from a lookup table because 0x7F breaks the ordering (see _ue4m3_ranks).
    Encoding.UE4M3: _Codec(Encoding.UE4M3, "u1", 0xFF, 0x100),
}

#: MXFP4: E8M0 keys from here up (2^126 and 2^127 as scales) can overflow float32 when decoded.
_OVERFLOW_KEY: dict[T, int] = {T.MXFP4: 0xFD}


@functools.lru_cache(maxsize=None)
def _ue4m3_ranks() -> tuple[np.ndarray, np.ndarray]:
    """(byte -> rank of its value, rank -> value) for UE4M3, so ranks order like values."""
    values = decode_bits(Encoding.UE4M3, np.arange(256))
    uniq, rank = np.unique(values, return_inverse=True)
    return rank.astype(np.uint16), uniq


def _key_values(codec: _Codec, keys: np.ndarray) -> np.ndarray:
    """|x| of each key as float64."""
    if codec.encoding is Encoding.UE4M3:
        return _ue4m3_ranks()[1][np.asarray(keys, dtype=np.int64)]
    return np.abs(decode_bits(codec.encoding, np.asarray(keys)))


@functools.lru_cache(maxsize=64)
def _threshold_key(codec: _Codec, limit: float) -> int:
    """The largest key whose |x| <= limit: keys above it (and below inf_key) are outliers."""
    if codec.encoding is Encoding.F32:
        key = int(np.float32(min(limit, 3.4028234663852886e38)).view(np.uint32))
        return key - 1 if float(_key_values(codec, key)) > limit else key
    if codec.encoding is Encoding.F64:
        return min(int(np.float64(limit).view(np.uint64)), codec.inf_key - 1)
    top = len(_ue4m3_ranks()[1]) if codec.encoding is Encoding.UE4M3 else codec.inf_key
    values = _key_values(codec, np.arange(top))
    return int(np.searchsorted(values, limit, side="right")) - 1


# ----- per-tensor plans ---------------------------------------------------------------------------

@dataclass(frozen=True)
class _Group:
    """Fields of one encoding, equally spaced in the block: read as one (n, k) strided view."""

    fields: tuple[FloatField, ...]
    offset: int
    spacing: int
    codec: _Codec

    @property
    def words(self) -> int:
        """Stored units per field (IQ1_M's scale spans four u16 words)."""
        return 4 if self.codec.encoding is Encoding.IQ1M_F16 else 1


@functools.lru_cache(maxsize=None)
def _groups(layout: BlockLayout) -> tuple[_Group, ...]:
    groups: list[_Group] = []
    for f in layout.fields:
        last = groups[-1] if groups else None
        if last is not None and last.codec.encoding is f.encoding and f.encoding is not Encoding.IQ1M_F16:
            gap = f.offset - last.fields[-1].offset
            if gap >= f.size and (len(last.fields) == 1 or gap == last.spacing):
                groups[-1] = _Group(last.fields + (f,), last.offset, gap, last.codec)
                continue
        groups.append(_Group((f,), f.offset, f.size, _CODECS[f.encoding]))
    return tuple(groups)


@dataclass(frozen=True)
class _Options:
    max_abs: float | None
    limit: int
    fail_fast: bool


@dataclass(frozen=True)
class _Plan:
    """One tensor to scan; picklable so a worker process can receive it."""

    index: int
    name: str
    path: str
    offset: int
    nbytes: int
    n_cols: int
    layout: BlockLayout
    deep: bool

    @property
    def units(self) -> int:
        return self.nbytes // self.layout.block_bytes

    @property
    def end(self) -> int:
        return self.offset + self.nbytes

    @property
    def units_per_row(self) -> int:
        return self.n_cols // self.layout.block_size


@dataclass
class _Acc:
    """What has been found so far in one tensor (or one piece of it, in a worker)."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    max_abs: float | None = None
    findings: list[Finding] = field(default_factory=list)
    stopped: bool = False

    def add_max(self, value: float | None) -> None:
        if value is not None and (self.max_abs is None or value > self.max_abs):
            self.max_abs = value

    def merge(self, other: _Acc, limit: int) -> None:
        for kind, n in other.counts.items():
            self.counts[kind] += n
        self.add_max(other.max_abs)
        self.findings.extend(other.findings[:max(0, limit - len(self.findings))])
        self.stopped = self.stopped or other.stopped

    @property
    def total(self) -> int:
        return sum(self.counts.values())


# ----- the core: scan whole units held in a uint8 array ----------------------------------------------

@dataclass
class _Candidates:
    """Located values of one slice worth reporting, in file order, before they become Findings."""

    offsets: list[int] = field(default_factory=list)
    makers: list[Callable[[], Finding]] = field(default_factory=list)


@dataclass
class _GroupPass:
    """One field group during a scan of one stretch of a tensor: its limits and the largest finite key."""

    group: _Group
    trigger: int          # keys >= trigger need a closer look (non-finite, or may overflow)
    threshold: int        # keys above it (finite) are outliers
    max_key: int = -1


def _scan_units(plan: _Plan, opts: _Options, acc: _Acc, data: np.ndarray, first_unit: int) -> None:
    """Scan ``data`` (whole units of ``plan`` starting at unit ``first_unit``) into ``acc``."""
    layout = plan.layout
    bb = layout.block_bytes
    per_slice = max(1, (SLICE_BYTES if layout.is_float_elements else BLOCK_SLICE_BYTES) // bb)
    passes = [_GroupPass(g, _OVERFLOW_KEY.get(layout.ggml_type, g.codec.inf_key),
                         g.codec.inf_key if opts.max_abs is None else _threshold_key(g.codec, opts.max_abs))
              for g in _groups(layout)]
    n_units = len(data) // bb
    for u0 in range(0, n_units, per_slice):
        if acc.stopped:
            break
        n = min(per_slice, n_units - u0)
        _scan_slice(plan, opts, acc, passes, data[u0 * bb:(u0 + n) * bb], first_unit + u0)
    for p in passes:
        if p.max_key >= 0:
            acc.add_max(float(_key_values(p.group.codec, p.max_key)))


_SCRATCH: dict[tuple[str, str], np.ndarray] = {}


def _scratch(role: str, dtype: str, size: int) -> np.ndarray:
    """A reused buffer per role and dtype (an ``out=`` target), grown on demand."""
    native = np.dtype(dtype).newbyteorder("=")
    buf = _SCRATCH.get((role, native.str))
    if buf is None or buf.size < size:
        buf = _SCRATCH[(role, native.str)] = np.empty(size, dtype=native)
    return buf[:size]


_WIDE = {1: "u1", 2: "<u2", 4: "<u4", 8: "<u8"}


def _raw(group: _Group, data: np.ndarray, n: int, bb: int, contiguous: bool) -> np.ndarray:
    """The group's stored units of ``n`` blocks as an (n, k) array.

    Float elements are viewed in place. Block fields are gathered through a strided view of ``data``
    (one wide integer per block when the fields are adjacent), so only their bytes are read, into a
    small contiguous buffer where the tests run at full speed.
    """
    unit = np.dtype(group.codec.unit)
    k = len(group.fields) * group.words
    if contiguous:
        return np.ndarray((n, k), dtype=unit, buffer=data, offset=group.offset, strides=(bb, unit.itemsize))
    out = _scratch("raw", group.codec.unit, n * k).reshape(n, k)
    width = k * unit.itemsize
    step = unit.itemsize if group.words > 1 else group.spacing
    if step == unit.itemsize and width in _WIDE:
        wide = np.ndarray((n,), dtype=_WIDE[width], buffer=data, offset=group.offset, strides=(bb,))
        np.copyto(out.view(_WIDE[width]).reshape(n), wide)
    else:
        for j in range(k):
            np.copyto(out[:, j], np.ndarray((n,), dtype=unit, buffer=data, offset=group.offset + j * step,
                                            strides=(bb,)))
    return out


def _keys(group: _Group, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(keys, bits): keys order like |x|; bits are the stored values (IQ1_M: assembled), (n, fields)."""
    codec = group.codec
    if codec.encoding is Encoding.IQ1M_F16:
        bits = iq1m_assemble(raw.view(np.uint8)).reshape(-1, 1)
        return bits & np.uint16(codec.mask), bits
    if codec.encoding is Encoding.UE4M3:
        return _ue4m3_ranks()[0][raw], raw
    keys = _scratch("keys", codec.unit, raw.size).reshape(raw.shape)
    np.bitwise_and(raw, codec.mask, out=keys)
    return keys, raw


def _scan_slice(plan: _Plan, opts: _Options, acc: _Acc, passes: list[_GroupPass], data: np.ndarray,
                first_unit: int) -> None:
    bb = plan.layout.block_bytes
    n = len(data) // bb
    slow: list[tuple[_GroupPass, np.ndarray, np.ndarray]] = []
    for p in passes:
        keys, bits = _keys(p.group, _raw(p.group, data, n, bb, plan.layout.is_float_elements))
        top = int(keys.max())
        if top < p.trigger and top <= p.threshold:     # the common case: nothing to report here
            if top > p.max_key:
                p.max_key = top
            continue
        finite = keys < p.group.codec.inf_key
        if finite.any():
            p.max_key = max(p.max_key, int(keys[finite].max()))
        slow.append((p, keys.copy(), bits.copy()))
    if slow or plan.deep:
        _report_slice(plan, opts, acc, slow, data, first_unit)


def _report_slice(plan: _Plan, opts: _Options, acc: _Acc, slow: list[tuple[_GroupPass, np.ndarray, np.ndarray]],
                  data: np.ndarray, first_unit: int) -> None:
    """Locate and classify what the fast test flagged in a slice (and decode it, with --deep)."""
    cands = _Candidates()
    room = 1 if opts.fail_fast else max(0, opts.limit - len(acc.findings))
    counts = dict.fromkeys(KINDS, 0)
    bad_blocks = [_locate(plan, opts, p.group, data, keys, bits, keys < p.group.codec.inf_key, p.trigger,
                          None if opts.max_abs is None else p.threshold, first_unit, counts, cands, room)
                  for p, keys, bits in slow]
    flagged = np.unique(np.concatenate(bad_blocks)) if bad_blocks else np.empty(0, np.int64)
    if plan.deep:
        _deep_slice(plan, data, flagged, first_unit, counts, cands, room)
    _commit(acc, opts, counts, cands)


def _locate(plan: _Plan, opts: _Options, group: _Group, data: np.ndarray, keys: np.ndarray, bits: np.ndarray,
            finite: np.ndarray, trigger: int, threshold: int | None, first_unit: int,
            counts: dict[str, int], cands: _Candidates, room: int) -> np.ndarray:
    """Classify the keys of one slice worth a look; returns the block indices that are non-finite."""
    codec = group.codec
    interesting = keys >= trigger
    if threshold is not None:
        interesting |= finite & (keys > threshold)
    flat = np.flatnonzero(interesting)
    k = keys.shape[1]
    rows, cols = np.divmod(flat, k)
    raw = bits[rows, cols].astype(np.uint64)
    values = decode_bits(codec.encoding, raw)
    kinds = np.full(len(flat), "", dtype=object)
    causes = np.full(len(flat), CAUSE_FIELD, dtype=object)
    kinds[np.isnan(values)] = "nan"
    kinds[np.isposinf(values)] = "+inf"
    kinds[np.isneginf(values)] = "-inf"
    suspect = np.flatnonzero((kinds == "") & (keys[rows, cols] >= trigger))
    if len(suspect):
        overflow = _overflow_kinds(plan.layout.ggml_type, data, rows[suspect], plan.layout.block_bytes)
        kinds[suspect] = overflow
        causes[suspect[overflow != ""]] = CAUSE_OVERFLOW
    if opts.max_abs is not None:
        kinds[(kinds == "") & (np.abs(values) > opts.max_abs)] = "outlier"
    keep = np.flatnonzero(kinds != "")
    for kind in KINDS:
        counts[kind] += int(np.count_nonzero(kinds[keep] == kind))
    size = group.fields[0].size
    for i in keep[:room]:
        f = group.fields[cols[i] if group.words == 1 else 0]
        unit = first_unit + int(rows[i])
        offset = plan.offset + unit * plan.layout.block_bytes + f.offset
        cands.offsets.append(offset)
        cands.makers.append(functools.partial(
            _finding, plan, unit, f, offset, hex_bits(int(raw[i]), min(size, 2) if group.words > 1 else size),
            float(values[i]), str(kinds[i]), str(causes[i])))
    nonfinite = keep[kinds[keep] != "outlier"]
    return first_unit + rows[nonfinite]


def _overflow_kinds(ggml_type: T, data: np.ndarray, rows: np.ndarray, bb: int) -> np.ndarray:
    """Decode the few blocks with a huge finite scale; the kind of the first non-finite value, or ''."""
    blocks = np.stack([data[r * bb:(r + 1) * bb] for r in rows]).reshape(-1)
    with np.errstate(all="ignore"):     # overflow is what we are looking for
        decoded = gguf.quants.dequantize(blocks, ggml_type).reshape(len(rows), -1)
    return np.array([_first_kind(row)[0] for row in decoded], dtype=object)


def _first_kind(values: np.ndarray) -> tuple[str, int]:
    """The kind of the first non-finite value in ``values`` and its index, or ('', -1)."""
    bad = np.flatnonzero(~np.isfinite(values))
    if not len(bad):
        return "", -1
    v = values[bad[0]]
    return ("nan" if np.isnan(v) else "+inf" if v > 0 else "-inf"), int(bad[0])


def _finding(plan: _Plan, unit: int, f: FloatField, offset: int, bits: str, value: float, kind: str,
             cause: str) -> Finding:
    layout = plan.layout
    if layout.is_float_elements:
        row, column = divmod(unit, plan.n_cols)
        block, width = column, 1
    else:
        row, block = divmod(unit, plan.units_per_row)
        column, width = block * layout.block_size + f.first_col, f.width
    return Finding(plan.name, plan.path, kind, row, column, width, block, f.name, offset, f.size, bits,
                   value, cause)


def _deep_slice(plan: _Plan, data: np.ndarray, flagged: np.ndarray, first_unit: int,
                counts: dict[str, int], cands: _Candidates, room: int) -> None:
    """Decode the slice with gguf.quants; report non-finite blocks the fields did not explain."""
    layout = plan.layout
    bb, bs = layout.block_bytes, layout.block_size
    step = max(1, DEEP_BYTES // bb)
    n = len(data) // bb
    listed = 0
    for b0 in range(0, n, step):
        m = min(step, n - b0)
        with np.errstate(all="ignore"):     # non-finite results are what we are looking for
            decoded = gguf.quants.dequantize(data[b0 * bb:(b0 + m) * bb], layout.ggml_type).reshape(m, bs)
        bad = np.flatnonzero(~np.isfinite(decoded).all(axis=1))
        bad = bad[~np.isin(first_unit + b0 + bad, flagged)]
        for r in bad:
            kind, col = _first_kind(decoded[r])
            counts[kind] += 1
            if listed >= room:
                continue
            listed += 1
            unit = first_unit + b0 + int(r)
            row, block = divmod(unit, plan.units_per_row)
            value = np.float32(decoded[r, col])
            offset = plan.offset + unit * bb
            cands.offsets.append(offset)
            cands.makers.append(functools.partial(
                Finding, plan.name, plan.path, kind, row, block * bs + col, 1, block, "decoded", offset, bb,
                hex_bits(int(value.view(np.uint32)), 4), float(value), CAUSE_DECODED))


def _commit(acc: _Acc, opts: _Options, counts: dict[str, int], cands: _Candidates) -> None:
    """Add a slice's counts and its first findings (in file order) to the accumulator."""
    order = sorted(range(len(cands.offsets)), key=cands.offsets.__getitem__)
    if opts.fail_fast:
        if order:
            first = cands.makers[order[0]]()
            acc.findings.append(first)
            acc.counts[first.kind] += 1
            acc.stopped = True
        return
    for kind, n in counts.items():
        acc.counts[kind] += n
    room = max(0, opts.limit - len(acc.findings))
    acc.findings.extend(cands.makers[i]() for i in order[:room])


# ----- the streamed path: a chunk consumer ---------------------------------------------------------

class ScanConsumer:
    """Scans the tensors of one file as its bytes stream past (``update(offset, data)``).

    Usable with :func:`ggaudit.digests.read_through` beside digest consumers, so one read pass can
    both hash a file and scan it. Chunks may cut blocks anywhere: a partial block is carried over.
    """

    def __init__(self, plans: Sequence[_Plan], opts: _Options,
                 progress: Callable[[int], None] | None = None) -> None:
        self._plans = sorted(plans, key=lambda p: p.offset)
        self._opts = opts
        self._progress = progress
        self.accs: dict[int, _Acc] = {p.index: _Acc() for p in self._plans}
        self.reached: set[int] = set()   # plans that have received bytes
        self._i = 0
        self._done = 0               # whole units of the current plan scanned
        self._carry = bytearray()    # bytes of a unit cut by a chunk boundary

    def update(self, offset: int, data: memoryview) -> None:
        arr = np.frombuffer(data, dtype=np.uint8)
        end = offset + len(arr)
        before = self._position()
        while self._i < len(self._plans):
            plan = self._plans[self._i]
            pos = plan.offset + self._done * plan.layout.block_bytes + len(self._carry)
            if pos >= end:
                break
            if pos < offset:
                raise ReadError(plan.path, "chunks skipped bytes of a tensor", offset=pos, field=plan.name)
            self.reached.add(plan.index)
            self._feed(plan, arr[pos - offset:min(end, plan.end) - offset])
            if self.accs[plan.index].stopped:
                raise _Stopped
            if self._done == plan.units:
                self._i, self._done = self._i + 1, 0
        if self._progress is not None:
            self._progress(self._position() - before)

    def _position(self) -> int:
        if self._i >= len(self._plans):
            return sum(p.nbytes for p in self._plans)
        plan = self._plans[self._i]
        return sum(p.nbytes for p in self._plans[:self._i]) + self._done * plan.layout.block_bytes

    def _feed(self, plan: _Plan, piece: np.ndarray) -> None:
        bb = plan.layout.block_bytes
        acc = self.accs[plan.index]
        if self._carry:
            take = piece[:bb - len(self._carry)]
            self._carry += take.tobytes()
            piece = piece[len(take):]
            if len(self._carry) < bb:
                return
            _scan_units(plan, self._opts, acc, np.frombuffer(bytes(self._carry), np.uint8), self._done)
            self._done += 1
            self._carry.clear()
        whole = len(piece) // bb
        if whole and not acc.stopped:
            _scan_units(plan, self._opts, acc, piece[:whole * bb], self._done)
            self._done += whole
        self._carry += piece[whole * bb:].tobytes()


def _run_streamed(plans: Sequence[_Plan], opts: _Options, progress: Callable[[int], None]) -> dict[int, _Acc]:
    accs: dict[int, _Acc] = {}
    for path, group in _by_file(plans).items():
        consumer = ScanConsumer(group, opts, progress)
        try:
            for start, end in _runs(group):
                read_through(path, [consumer], start=start, end=end, chunk_size=STREAM_CHUNK_BYTES,
                             threaded=False)
        except _Stopped:
            pass
        accs.update({k: v for k, v in consumer.accs.items() if k in consumer.reached})
        if any(a.stopped for a in consumer.accs.values()):
            break
    return accs


def _runs(plans: Sequence[_Plan]) -> Iterator[tuple[int, int]]:
    """Byte ranges to read: neighbouring tensors together, but never a long stretch nobody asked for."""
    start, end = plans[0].offset, plans[0].end
    for p in plans[1:]:
        if p.offset - end > SLICE_BYTES:
            yield start, end
            start = p.offset
        end = max(end, p.end)
    yield start, end


def _by_file(plans: Iterable[_Plan]) -> dict[str, list[_Plan]]:
    files: dict[str, list[_Plan]] = {}
    for p in sorted(plans, key=lambda p: (p.path, p.offset)):
        files.setdefault(p.path, []).append(p)
    return files


# ----- the mapped path: worker processes -------------------------------------------------------------

@dataclass(frozen=True)
class _Piece:
    plan: _Plan
    first_unit: int
    n_units: int

    @property
    def start(self) -> int:
        return self.plan.offset + self.first_unit * self.plan.layout.block_bytes

    @property
    def end(self) -> int:
        return self.start + self.n_units * self.plan.layout.block_bytes


@dataclass(frozen=True)
class _Task:
    path: str
    identity: FileIdentity
    pieces: tuple[_Piece, ...]

    @property
    def start(self) -> int:
        return self.pieces[0].start

    @property
    def end(self) -> int:
        return self.pieces[-1].end

    @property
    def nbytes(self) -> int:
        return sum(p.end - p.start for p in self.pieces)


def _make_tasks(plans: Sequence[_Plan], identities: dict[str, FileIdentity], task_bytes: int) -> Iterator[_Task]:
    """Cut tensors into pieces and pack neighbouring pieces into tasks of about ``task_bytes``."""
    for path, group in _by_file(plans).items():
        pieces: list[_Piece] = []
        size = 0
        for plan in group:
            per_piece = max(1, task_bytes // plan.layout.block_bytes)
            for u0 in range(0, plan.units, per_piece):
                piece = _Piece(plan, u0, min(per_piece, plan.units - u0))
                if pieces and (size + piece.end - piece.start > task_bytes or piece.start - pieces[-1].end > task_bytes):
                    yield _Task(path, identities[path], tuple(pieces))
                    pieces, size = [], 0
                pieces.append(piece)
                size += piece.end - piece.start
        if pieces:
            yield _Task(path, identities[path], tuple(pieces))


def _run_task(task: _Task, opts: _Options) -> list[tuple[int, _Acc]]:
    """In a worker: map the task's window of the file and scan its pieces in place."""
    fd = os.open(task.path, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (task.identity.device, task.identity.inode) or st.st_size < task.end:
            raise ReadError(task.path, f"file changed during scan (now {st.st_size} bytes, "
                            f"expected {task.identity.size})", offset=task.end)
        base = task.start - task.start % mmap.ALLOCATIONGRANULARITY
        # No MAP_POPULATE: the kernel's fault-around maps 64 KiB per fault, which measured faster.
        mm = mmap.mmap(fd, task.end - base, access=mmap.ACCESS_READ, offset=base)
    finally:
        os.close(fd)
    try:
        return _scan_pieces(task, opts, mm, base)
    finally:
        try:
            mm.close()
        except BufferError:     # a view survives in a traceback; the mapping goes with the process
            pass


def _scan_pieces(task: _Task, opts: _Options, mm: mmap.mmap, base: int) -> list[tuple[int, _Acc]]:
    out: list[tuple[int, _Acc]] = []
    window = np.frombuffer(mm, dtype=np.uint8)
    try:
        for piece in task.pieces:
            acc = _Acc()
            _scan_units(piece.plan, opts, acc, window[piece.start - base:piece.end - base], piece.first_unit)
            out.append((piece.plan.index, acc))
            if acc.stopped:
                break
    finally:
        del window
    return out


def _pool_context() -> multiprocessing.context.BaseContext:
    # fork starts a worker in milliseconds, which matters when a whole scan takes 100 ms; where it is
    # unavailable (Windows, macOS default) spawn is correct, only slower to start.
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def _run_mapped(plans: Sequence[_Plan], opts: _Options, files: Sequence[GGUFFile], workers: int,
                progress: Callable[[int], None]) -> dict[int, _Acc]:
    identities = {f.path: f.identity for f in files}
    tasks = _make_tasks(plans, identities, TASK_BYTES)
    accs: dict[int, _Acc] = {}
    pending: deque[tuple[_Task, Future[list[tuple[int, _Acc]]]]] = deque()
    pool = ProcessPoolExecutor(workers, mp_context=_pool_context())
    current: _Task | None = None
    try:
        while len(pending) < workers * _QUEUE_PER_WORKER and (task := next(tasks, None)) is not None:
            pending.append((task, pool.submit(_run_task, task, opts)))
        while pending:
            current, future = pending.popleft()
            results = future.result()
            if (task := next(tasks, None)) is not None:
                pending.append((task, pool.submit(_run_task, task, opts)))
            if _merge(accs, results, opts):
                break
            progress(current.nbytes)
    except BrokenProcessPool:
        path = current.path if current is not None else files[0].path
        raise ReadError(path, "file changed during scan: a reader process was killed "
                        "(SIGBUS from a mapping of a file that shrank?)",
                        offset=current.start if current is not None else None) from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return accs


def _merge(accs: dict[int, _Acc], results: list[tuple[int, _Acc]], opts: _Options) -> bool:
    """Fold a task's results in; True when --fail-fast has found its finding."""
    for index, acc in results:
        accs.setdefault(index, _Acc()).merge(acc, opts.limit if not opts.fail_fast else 1)
        if acc.stopped:
            return True
    return False


# ----- the entry point ------------------------------------------------------------------------------

def _select(model: Model, patterns: Collection[str] | None) -> list[Tensor]:
    if not patterns:
        return list(model.tensors)
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(t.name, pattern) for t in model.tensors):
            raise UsageError(model.source, f"no tensor matches {pattern!r}", field="--tensor")
    return [t for t in model.tensors if any(fnmatch.fnmatchcase(t.name, p) for p in patterns)]


def _fp8_names(model: Model, names: Collection[str]) -> set[str]:
    for name in names:
        t = model.tensor(name)
        if t.ggml_type is not T.I8:
            raise UsageError(model.source, f"{name} is {t.ggml_type.name}: only an I8 tensor can hold FP8 "
                             "E4M3 bytes", field="--as")
    return set(names)


@functools.lru_cache(maxsize=None)
def deep_supported(ggml_type: T) -> bool:
    """Whether gguf.quants can dequantize ``ggml_type`` (what --deep needs)."""
    layout = layout_of(ggml_type)
    try:
        gguf.quants.dequantize(np.zeros(layout.block_bytes, np.uint8), ggml_type)
    except NotImplementedError:
        return False
    return True


def _check_options(source: str, max_abs: float | None, limit: int) -> None:
    if max_abs is not None and not (math.isfinite(max_abs) and max_abs >= 0):
        raise UsageError(source, f"--max-abs must be a finite number >= 0, not {max_abs!r}", field="--max-abs")
    if limit < 0:
        raise UsageError(source, f"--limit must be >= 0, not {limit}", field="--limit")


def _check_identity(files: Sequence[GGUFFile], when: str) -> None:
    for f in files:
        try:
            now = FileIdentity.of(os.stat(f.path))
        except OSError as err:
            raise ReadError(f.path, f"file {when}: {err.strerror}") from None
        if now != f.identity:
            raise ReadError(f.path, f"file {when} (size {f.identity.size} -> {now.size}, "
                            f"mtime {f.identity.mtime_ns} -> {now.mtime_ns})")


def scan(model: Model | str | os.PathLike[str], *, tensors: Collection[str] | None = None, deep: bool = False,
         max_abs: float | None = None, as_fp8: Collection[str] = (), limit: int = 16, fail_fast: bool = False,
         progress: ProgressCallback | None = None, workers: int | None = None) -> ScanReport:
    """Scan a model's tensors for NaN, Inf and (with ``max_abs``) outliers.

    ``tensors``: glob patterns selecting tensors by name (each must match one). ``deep``: also decode
    block-quantized tensors with gguf.quants and check the decoded values. ``as_fp8``: names of I8
    tensors that hold FP8 E4M3 bytes. ``limit``: findings listed per tensor (all are counted).
    ``fail_fast``: stop at the first finding. ``progress(done_bytes, total_bytes)`` is called as the
    scan advances. ``workers``: reader processes (0 reads in this process; None picks: 0 for models
    under 64 MiB of tensor data, else up to 2).
    """
    m = model if isinstance(model, Model) else open_model(model)
    _check_options(m.source, max_abs, limit)
    fp8 = _fp8_names(m, as_fp8)
    selected = _select(m, tensors)
    opts = _Options(None if max_abs is None else float(max_abs), limit, fail_fast)
    plans, warnings = _plans(selected, fp8, deep)
    total = sum(p.nbytes for p in plans)
    n_workers = _workers(workers, total)
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, total)

    started = time.perf_counter()
    _check_identity(m.files, "changed since it was opened")
    if n_workers:
        accs = _run_mapped(plans, opts, m.files, n_workers, advance)
    else:
        accs = _run_streamed(plans, opts, advance)
    _check_identity(m.files, "changed during scan")
    elapsed = time.perf_counter() - started
    return _report(m, selected, plans, accs, fp8, warnings, opts, ScanStats(total, elapsed, n_workers))


def _workers(workers: int | None, total: int) -> int:
    if workers is not None:
        if workers < 0:
            raise ValueError("workers must be >= 0")
        return workers
    if total < AUTO_WORKERS_MIN_BYTES:
        return 0
    return max(1, min(2, os.cpu_count() or 1))


def _plans(selected: Sequence[Tensor], fp8: set[str], deep: bool) -> tuple[list[_Plan], list[str]]:
    plans, undecodable = [], {}
    for index, t in enumerate(selected):
        layout = FP8_E4M3_ELEMENTS if t.name in fp8 else layout_of(t.ggml_type)
        if layout.is_integer:
            continue
        blockwise = not layout.is_float_elements
        decode = deep and blockwise and deep_supported(t.ggml_type)
        if deep and blockwise and not decode:
            undecodable[t.ggml_type.name] = undecodable.get(t.ggml_type.name, 0) + 1
        plans.append(_Plan(index, t.name, t.path, t.offset, t.nbytes, t.n_cols, layout, decode))
    warnings = [f"--deep: gguf.quants cannot decode {name}; {n} tensor{'s' if n > 1 else ''} of that type "
                "checked by block fields only" for name, n in sorted(undecodable.items())]
    return plans, warnings


def _report(model: Model, selected: Sequence[Tensor], plans: Sequence[_Plan], accs: dict[int, _Acc],
            fp8: set[str], warnings: list[str], opts: _Options, stats: ScanStats) -> ScanReport:
    by_index = {p.index: p for p in plans}
    out: list[TensorScan] = []
    stopped = any(a.stopped for a in accs.values())
    for index, t in enumerate(selected):
        plan = by_index.get(index)
        acc = accs.get(index)
        if plan is not None and acc is None:
            continue          # never reached: --fail-fast stopped before it
        acc = acc or _Acc()
        check = CHECK_NONE if plan is None else CHECK_ELEMENTS if plan.layout.is_float_elements else CHECK_FIELDS
        out.append(TensorScan(t.name, t.ggml_type.name, t.shape, t.path, t.offset, t.nbytes, check,
                              dict(acc.counts), acc.max_abs, tuple(acc.findings),
                              "fp8_e4m3" if t.name in fp8 else None, bool(plan and plan.deep),
                              not acc.stopped))
    if stopped:
        skipped = sum(1 for p in plans if p.index not in accs)
        warnings = warnings + [f"--fail-fast: stopped at the first finding; {skipped} tensors not scanned"]
    return ScanReport(model.source, tuple(f.path for f in model.files), tuple(out), tuple(warnings),
                      not stopped, opts.max_abs, stats)
