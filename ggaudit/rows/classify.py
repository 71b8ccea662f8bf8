"""One classifier for every row a read path or an engine's capture got wrong: where it first differs from
the file (byte, block, column), what kind of fault it looks like (KINDS) and where its content came from.

A row arrives in one of two forms: raw bytes (every read path, a raw capture) or decoded values (a
float16/float32 capture, compared with ggaudit's own decode of the file's row). The forms differ only in
how content is compared, searched for and shown (RawRow, DecodedRow); the questions, asked in one order,
the search for the content's source and the RowMismatch built from the answers are shared:

1. a cache hit holding the content of another place in the file: cache-crosstalk;
2. a buffer handed out before its read landed, or the content of the row gathered just before: stale;
3. from the first difference on, the poison pattern (or, from a read that came back short or an engine's
   capture, zeros): short-read;
4. from a read path's read that returned its full count, one byte other than the poison repeated over
   whole sectors (zeros, 0xff): filled, by something below the read;
5. the content of another row of the batch, or of the file around the row: misplaced (the bytes of the
   direct path's alignment probe at offset 0, a previous request's buffer: stale);
6. anything else: garbage (until ggaudit.rows.far_search finds the bytes further away).
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar, NamedTuple

import numpy as np

from ..errors import UsageError
from ..evidence.decide import AGREEMENT, MANIFEST, PUBLISHED
from ..evidence.paths import MODES
from ..json_shape import json_key, json_record, to_json
from .gather import Sample, uniform
from ..evidence.readers import ReadFailed, POISON, SECTOR, WINDOW_64K, BufferedReader, align_down, align_up
from .table import RowTable

__all__ = [
    "KINDS",
    "UNCLASSIFIED",
    "Classifier",
    "DecodedRow",
    "Delivery",
    "Filled",
    "RawRow",
    "RowMismatch",
    "RowPlace",
    "captured",
    "first_nonfinite",
    "locate",
]

KINDS = ("short-read", "filled", "stale", "misplaced", "cache-crosstalk", "garbage")
#: Where a row was delivered wrong: a read path's gather (plain, through the row cache, prefetched), the
#: whole-table sweep, an engine's capture, or the reference read itself (found wrong by the evidence).
STAGES = ("gather", "cache-miss", "cache-hit", "cache-pressure", "prefetch", "sweep", "capture", "reference")
#: What decided a row's right bytes; ``buffered``: nothing did, the reference read stands.
REFERENCES = (MANIFEST, PUBLISHED, AGREEMENT, "buffered")
#: The most differing bytes of a row a ``garbage`` mismatch spells out bit by bit.
FLIPS_SHOWN = 4
#: Mismatches beyond the reporting cap are counted under this name instead of being classified.
UNCLASSIFIED = "unclassified"
#: Bytes shown from the first difference on.
HEX_WINDOW = 16
#: Places in the file holding a row's content that are considered (the nearest of them is named).
MAX_HITS = 64


@json_record(kw_only=False)
class Filled:
    """One byte repeated over whole sectors of a row: absolute [offset, offset + length), sectors
    first..last (offset // 512), inclusive."""

    byte: int = json_key(minimum=0, maximum=255)
    offset: int = json_key(minimum=0)
    length: int = json_key(minimum=1)
    #: The first and last sector (offset // 512) it covers.
    sectors: tuple[int, int] = json_key(init=False, minimum=0, array={"maxItems": 2})

    def __post_init__(self) -> None:
        object.__setattr__(self, "sectors", (self.offset // SECTOR, (self.offset + self.length - 1) // SECTOR))

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


@json_record(kw_only=False)
class Delivery:
    """Which deliveries of the row (``reference``, the read paths) held the same bytes, shown from the
    mismatch's first differing byte, and whether they are the row's right bytes."""

    paths: tuple[str, ...] = json_key(values=("reference", *MODES))
    shown: str = json_key(name="bytes")
    right: bool | None      # None: nothing decided which bytes are right

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


@json_record(kw_only=False)
class RowPlace:
    """Where in a row a value sits: its block and (decoded) column."""

    block: int = json_key(minimum=0)
    column: int = json_key(minimum=0)

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


def first_nonfinite(table: RowTable, values: np.ndarray | None) -> RowPlace | None:
    """The place of the first NaN or Inf among a row's decoded *values* (None: all finite, or not decoded)."""
    if values is None:
        return None
    bad = np.flatnonzero(~np.isfinite(values))
    if not bad.size:
        return None
    column = int(bad[0])
    return RowPlace(column // table.tensor.block_size, column)


@json_record
class RowMismatch:
    """One row whose content from a read path (or capture) differs from the file."""

    JSON_DEF: ClassVar[str] = "row_mismatch"

    kind: str = json_key(values=KINDS)
    mode: str = json_key(values=(*MODES, "capture"))
    stage: str = json_key(values=STAGES)
    file: str
    tensor: str
    row: int = json_key(minimum=0)
    row_offset: int = json_key(minimum=0)        # absolute offset of the row
    length: int = json_key(minimum=0)            # row bytes
    byte: int = json_key(minimum=0)              # first differing byte within the row (values: its block's first)
    offset: int = json_key(minimum=0)            # its absolute file offset
    block: int = json_key(minimum=0)
    column: int = json_key(minimum=0)
    expected: str        # hex, from the first differing byte (raw bits of the value for decoded captures)
    actual: str
    differing: int = json_key(minimum=0)         # bytes (or values) that differ
    #: What ``differing`` counts: bytes, or decoded values for a float capture.
    unit: str = json_key(default="bytes", values=("bytes", "values"))
    expected_finite: bool | None
    actual_finite: bool | None
    #: The first NaN or Inf of the row delivered (None: it is finite, or does not decode).
    actual_nonfinite: RowPlace | None = None
    other_row: int | None = json_key(default=None, minimum=0)
    other_offset: int | None = json_key(default=None, minimum=0)
    max_abs_diff: float | None = json_key(default=None, minimum=0)
    detail: str = ""
    filled: Filled | None = None
    #: What decided the row's right bytes (``expected``): manifest, agreement, or buffered (the reference read).
    reference: str = json_key(default="buffered", values=REFERENCES)
    delivered: tuple[Delivery, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


class _Verdict(NamedTuple):
    kind: str
    other_row: int | None
    other_offset: int | None
    detail: str
    filled: Filled | None = None


def _hex(data: bytes) -> str:
    return data.hex(" ")


def locate(table: RowTable, byte: int, expected: bytes, actual: bytes) -> tuple[int, int]:
    """(block, column) of the first difference at *byte*: the first decoded column that differs from that
    block on, when the rows decode; else the block's first column."""
    return _block_and_column(table, byte, table.decode(expected), table.decode(actual))


def _block_and_column(table: RowTable, byte: int, exp: np.ndarray | None,
                      act: np.ndarray | None) -> tuple[int, int]:
    block = byte // table.tensor.block_bytes
    first_col = block * table.tensor.block_size
    if exp is not None and act is not None and exp.shape == act.shape:
        differs = np.flatnonzero(exp.view(np.uint64) != act.view(np.uint64))
        later = differs[differs >= first_col]
        if later.size:
            return block, int(later[0])
    return block, first_col


class RawRow:
    """A row as raw bytes (a read path's, or a raw capture's) against the file's bytes of the row."""

    unit = "bytes"
    max_abs_diff: float | None = None
    note = ""

    def __init__(self, table: RowTable, row: int, expected: bytes, actual: bytes) -> None:
        self.table, self.row, self.expected, self.actual = table, row, expected, actual

    @property
    def same(self) -> bool:
        return self.actual == self.expected

    @functools.cached_property
    def first(self) -> int:
        """The first differing byte (0 when the lengths differ)."""
        if len(self.actual) != len(self.expected):
            return 0
        return next((i for i, (a, b) in enumerate(zip(self.expected, self.actual, strict=True)) if a != b), 0)

    @functools.cached_property
    def _decoded(self) -> tuple[np.ndarray | None, np.ndarray | None]:
        return self.table.decode(self.expected), self.table.decode(self.actual)

    @property
    def differing(self) -> int:
        return sum(a != b for a, b in zip(self.expected, self.actual, strict=False))

    def holds(self, raw: bytes) -> bool:
        """Whether the row delivered is exactly the bytes *raw*."""
        return self.actual == raw

    def fill(self) -> str | None:
        tail = self.actual[self.first:]
        if uniform(tail, POISON):
            return "poison"
        return "zeros" if uniform(tail, 0) else None

    def at(self) -> str:
        return f"offset {self.table.row_offset(self.row) + self.first}"

    def filled(self) -> Filled | None:
        """Every sector (as far as the row holds it) that holds a differing byte is one byte other than the
        poison, repeated: (its bytes, offsets) or None."""
        got, want, n = self.actual, self.expected, len(self.actual)
        if n != len(want) or not n:
            return None
        at = self.table.row_offset(self.row)
        last = next(i for i in range(n - 1, -1, -1) if got[i] != want[i])
        lo = max(0, align_down(at + self.first, SECTOR) - at)
        hi = min(n, align_up(at + last + 1, SECTOR) - at)
        byte = got[self.first]
        if byte == POISON or not uniform(got[lo:hi], byte):
            return None
        return Filled(byte, at + lo, hi - lo)

    def repeats(self) -> bool:
        # One byte repeated (zeros, poison) would "match" padding anywhere.
        return not self.actual or uniform(self.actual, self.actual[0])

    def flips(self) -> str:
        """The bits that differ, when a few bytes do (up to FLIPS_SHOWN): ``byte 40 xor 0x10 (1 bit)``."""
        if len(self.actual) != len(self.expected):
            return ""
        exp, act = np.frombuffer(self.expected, np.uint8), np.frombuffer(self.actual, np.uint8)
        where = np.flatnonzero(exp != act)[:FLIPS_SHOWN + 1].tolist()
        if not where or len(where) > FLIPS_SHOWN:
            return ""
        parts = [f"byte {i} xor 0x{exp[i] ^ act[i]:02x}" for i in where]
        bits = sum(int(exp[i] ^ act[i]).bit_count() for i in where)
        return f"{', '.join(parts)} ({bits} {'bit' if bits == 1 else 'bits'} flipped)"

    def found(self, window: bytes, lo: int, here: int) -> list[int]:
        """File offsets in *window* (which starts at *lo*) other than *here* holding the row's bytes, at
        any offset."""
        hits: list[int] = []
        pos = window.find(self.actual)
        while pos >= 0 and len(hits) < MAX_HITS:
            if lo + pos != here:
                hits.append(lo + pos)
            pos = window.find(self.actual, pos + 1)
        return hits

    def where(self) -> tuple[int, int, int]:
        """(byte, block, column) of the first difference."""
        return (self.first, *_block_and_column(self.table, self.first, *self._decoded))

    def shown(self) -> tuple[str, str]:
        k = self.first
        return _hex(self.expected[k:k + HEX_WINDOW]), _hex(self.actual[k:k + HEX_WINDOW])

    def finite(self) -> tuple[bool | None, bool | None]:
        exp, act = self._decoded
        return (None if exp is None else bool(np.isfinite(exp).all()),
                None if act is None else bool(np.isfinite(act).all()))

    def nonfinite(self) -> RowPlace | None:
        return first_nonfinite(self.table, self._decoded[1])


class DecodedRow:
    """A captured row of decoded values against ggaudit's decode of the file's row, cast to its type;
    values are equal when their bits are (any NaN equals any NaN)."""

    unit = "values"

    def __init__(self, table: RowTable, row: int, expected: bytes, got: np.ndarray) -> None:
        self.table, self.row, self.raw, self.got = table, row, expected, got
        self.bits = _uint_of(got.dtype)
        self.want = self._decode(expected)
        equal = self._equal(self.want.reshape(1, -1))[0]
        self.same = bool(equal.all())
        self.first = int(np.flatnonzero(~equal)[0]) if not self.same else -1
        self.differing = int((~equal).sum())
        self.max_abs_diff = _max_abs_diff(self.want, got, equal)

    def _decode(self, raw: bytes) -> np.ndarray:
        decoded = self.table.decode(raw)
        if decoded is None:
            raise UsageError(self.table.path, f"cannot decode {self.table.tensor.ggml_type.name} rows to compare "
                                              "floats", field=self.table.name)
        with np.errstate(over="ignore"):     # a value beyond the capture's type is its Inf, as the engine's cast
            return decoded.astype(self.got.dtype)

    def _equal(self, rows: np.ndarray) -> np.ndarray:
        """Per value of each of *rows* (2-D, decoded), whether it equals the captured value."""
        equal: np.ndarray = (rows.view(self.bits) == self.got.view(self.bits)) | (np.isnan(rows) & np.isnan(self.got))
        return equal

    def holds(self, raw: bytes) -> bool:
        """Whether the captured values are the decode of the row bytes *raw*."""
        return bool(self._equal(self._decode(raw).reshape(1, -1)).all())

    def fill(self) -> str | None:
        col = self.first
        return "zeros" if not np.any(self.got[col:]) and np.any(self.want[col:]) else None

    def at(self) -> str:
        return f"column {self.first}"

    def filled(self) -> Filled | None:
        return None  # decoded values show no sectors

    def flips(self) -> str:
        return ""    # the values' bits are shown in the mismatch's lines

    def repeats(self) -> bool:
        # One value repeated throughout says nothing about which row it came from.
        bits: np.ndarray = self.got.view(self.bits)
        return not bits.size or bool((bits == bits[0]).all())

    def found(self, window: bytes, lo: int, here: int) -> list[int]:
        """File offsets of the table's rows inside *window* (which starts at *lo*), other than *here*, that
        decode to the values."""
        t = self.table
        rb, base = t.row_bytes, t.tensor.offset
        first = min(t.n_rows, max(0, -(-(lo - base) // rb)))
        end = max(first, min(t.n_rows, (lo + len(window) - base) // rb))
        if end == first:
            return []
        start = t.row_offset(first) - lo
        rows = self._decode(window[start:start + (end - first) * rb]).reshape(end - first, -1)
        same = (t.row_offset(first + int(i)) for i in np.flatnonzero(self._equal(rows).all(axis=1)))
        return [off for off in same if off != here][:MAX_HITS]

    def where(self) -> tuple[int, int, int]:
        """(first byte of the block, block, column) of the first differing value."""
        block = self.first // self.table.tensor.block_size
        return block * self.table.tensor.block_bytes, block, self.first

    def shown(self) -> tuple[str, str]:
        col, width = self.first, self.got.itemsize * 2
        return (f"{int(self.want[col:col + 1].view(self.bits)[0]):0{width}x}",
                f"{int(self.got[col:col + 1].view(self.bits)[0]):0{width}x}")

    def finite(self) -> tuple[bool | None, bool | None]:
        return bool(np.isfinite(self.want).all()), bool(np.isfinite(self.got).all())

    def nonfinite(self) -> RowPlace | None:
        return first_nonfinite(self.table, self.got)

    @property
    def note(self) -> str:
        """The stored block the first differing value decodes from: the values alone do not show it."""
        byte, _, _ = self.where()
        return f"; stored block: {_hex(self.raw[byte:byte + self.table.tensor.block_bytes])}"


Form = RawRow | DecodedRow


def _max_abs_diff(want: np.ndarray, got: np.ndarray, equal: np.ndarray) -> float | None:
    """The largest |want - got| of the finite values; None when a value that differs is NaN or Inf on
    either side (the difference is unbounded: a NaN beside "max abs diff 0" would read as equal) or when
    no value is finite on both sides."""
    finite = np.isfinite(want) & np.isfinite(got)
    if np.any(~equal & ~finite) or not finite.any():
        return None
    return float(np.max(np.abs(want[finite].astype(np.float64) - got[finite])))


def _uint_of(dtype: np.dtype) -> type:
    return {2: np.uint16, 4: np.uint32, 8: np.uint64}[np.dtype(dtype).itemsize]


def captured(table: RowTable, row: int, expected: bytes, got: np.ndarray) -> Form:
    """A captured row in the form it was captured in: uint8 rows are raw bytes, float rows decoded values."""
    if got.dtype == np.uint8:
        return RawRow(table, row, expected, got.tobytes())
    return DecodedRow(table, row, expected, got)


class Classifier:
    """Turns a row that differs from the file into a located, classified RowMismatch; reads the file around
    the row through the reference when looking for where the row's content came from. *probed*: bytes at
    offset 0 the read path read once when it was opened (the direct path's alignment probe), 0 for none.
    *failed* takes a read of the file around a row that fails (None: it raises): the row is then classified
    from what is known without it."""

    def __init__(self, table: RowTable, reference: BufferedReader, probed: int = 0,
                 failed: ReadFailed | None = None) -> None:
        self.table = table
        self.reference = reference
        self.probed = probed
        self.failed = failed
        self._unsearched = False     # the row being classified: the read of the file around it failed

    def mismatch(self, sample: Sample, expected: bytes, mode: str, stage: str,
                 previous: bytes | None = None, batch: dict[int, bytes] | None = None) -> RowMismatch:
        """A read path's row (read into a poisoned buffer); *batch* holds the file's bytes of rows it may
        have been confused with."""
        # A view into a live buffer is classified by what it shows now (bytes(bytes) is no copy).
        form = RawRow(self.table, sample.row, expected, bytes(sample.data))
        return self.classify(form, mode, stage, previous=previous, batch=batch, unlanded=sample.unlanded,
                             via_cache=sample.via_cache, cut=sample.cut, poisoned=True)

    def classify(self, form: Form, mode: str, stage: str, *, previous: bytes | None = None,
                 batch: dict[int, bytes] | None = None, unlanded: bool = False,
                 via_cache: bool = False, cut: bool = False, poisoned: bool = False) -> RowMismatch:
        """*previous* is the file's bytes of the row gathered just before this one; *cut*: the read came
        back short; *poisoned*: ggaudit poisoned the buffer before the read (a read path, not a capture)."""
        t, row = self.table, form.row
        verdict = self._verdict(form, previous, batch or {}, _How(unlanded, via_cache, cut, poisoned))
        byte, block, column = form.where()
        at = t.row_offset(row)
        expected, actual = form.shown()
        expected_finite, actual_finite = form.finite()
        return RowMismatch(kind=verdict.kind, mode=mode, stage=stage, file=t.path, tensor=t.name, row=row,
                           row_offset=at, length=t.row_bytes, byte=byte, offset=at + byte, block=block,
                           column=column, expected=expected, actual=actual, differing=form.differing,
                           expected_finite=expected_finite, actual_finite=actual_finite,
                           actual_nonfinite=form.nonfinite(), other_row=verdict.other_row,
                           other_offset=verdict.other_offset, max_abs_diff=form.max_abs_diff,
                           detail=verdict.detail + form.note, unit=form.unit, filled=verdict.filled)

    def _verdict(self, form: Form, previous: bytes | None, batch: dict[int, bytes], how: _How) -> _Verdict:
        unit = form.unit
        self._unsearched = False
        # Searching the file is the costly step: done once, first only for a cache hit (crosstalk wins).
        other = self._source(form, batch) if how.via_cache else None
        if other is not None:
            held = f"row {other[0]}" if other[0] is not None else f"the {unit} of offset {other[1]}"
            return _Verdict("cache-crosstalk", *other, f"cache hit for row {form.row} held {held}")
        if how.unlanded:
            return _Verdict("stale", None, None,
                            "buffer handed out before its read landed: it held its previous contents")
        if previous is not None and form.holds(previous):
            return _Verdict("stale", None, None, f"the {unit} of the previous row gathered into the same buffer")
        fill = form.fill()
        # Zeros in a buffer ggaudit poisoned came from below, unless the read came back short.
        if fill == "poison" or (fill is not None and (how.cut or not how.poisoned)):
            return _Verdict("short-read", None, None, f"{fill} from {form.at()} on: the read stopped there")
        filled = form.filled() if how.poisoned else None
        if filled is not None:
            first, last = filled.sectors
            return _Verdict("filled", None, None,
                            f"0x{filled.byte:02x} over offsets {filled.offset}-{filled.offset + filled.length - 1} "
                            f"(sectors {first}-{last}) from a read that returned its full count: filled below "
                            "the read path (the device, a VM disk or a storage layer), not a short read", filled)
        if not how.via_cache:
            other = self._source(form, batch)
        if other is not None:
            if other[0] is None and other[1] + self.table.row_bytes <= self.probed:
                return _Verdict("stale", None, other[1], f"the {unit} of offset {other[1]}, which only the "
                                f"alignment probe (the read of offset 0 when the path opened) read: a previous "
                                "request's buffer")
            name = f"row {other[0]}" if other[0] is not None else f"offset {other[1]}"
            return _Verdict("misplaced", *other, f"the {unit} of {name}")
        if self._unsearched:
            return _Verdict("garbage", None, None, f"{unit} not looked for near the row: the read of the file "
                                                   "around it failed")
        flips = form.flips()
        return _Verdict("garbage", None, None, f"{unit} found nowhere near the row" + (f": {flips}" if flips else ""))

    def _source(self, form: Form, batch: dict[int, bytes]) -> tuple[int | None, int] | None:
        """(row or None, file offset) of the place nearest the row that holds the row's content: a row of
        *batch*, else anywhere within 64 KiB (or 8 rows) of the row."""
        if form.repeats():
            return None
        t, row = self.table, form.row
        for other, data in batch.items():
            if other != row and form.holds(data):
                return other, t.row_offset(other)
        radius = max(WINDOW_64K, 8 * t.row_bytes)
        here = t.row_offset(row)
        lo = max(0, here - radius)
        hi = min(t.file_size, here + t.row_bytes + radius)
        around = self._around(lo, hi - lo)
        hits = [] if around is None else form.found(around, lo, here)
        if not hits:
            return None
        found = min(hits, key=lambda off: abs(off - here))
        other, within = t.row_at(found)
        in_table = within == 0 and 0 <= other < t.n_rows
        return (other if in_table else None), found

    def _around(self, offset: int, length: int) -> bytes | None:
        """The file's bytes around a row, None where the read failed (handed to *failed*)."""
        data = self.reference.read_or_report(offset, length, self.failed)
        self._unsearched = self._unsearched or data is None
        return data


class _How(NamedTuple):
    """How a row was read: what the classifier knows of it besides its bytes."""

    unlanded: bool
    via_cache: bool
    cut: bool
    poisoned: bool
