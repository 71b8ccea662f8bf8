"""Open a GGUF file or split set read-only and produce a validated description of its layout.

The header is parsed here, streamed and bounded, rather than with ``gguf.GGUFReader``: every count and
length is checked against the bytes that remain before anything is allocated or looped over, so a
hostile header is rejected in milliseconds whatever it claims, and a real model with a large vocabulary
opens without decoding its strings (only their lengths are walked).
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import struct
import sys
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any
from collections.abc import Callable, Iterator, Mapping

import xxhash

from .blocks import GGMLQuantizationType, GGUFValueType, known_type, layout_of
from . import signatures
from ..io import opening, positioned
from ..errors import FormatError, ReadError, UsageError
from ..io.identity import FileIdentity
from ..untrusted import OUTSIDE, confine, sibling_roots

log = logging.getLogger(__name__)

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4
#: Longest string accepted anywhere in a header; real ones (chat templates) are tens of KiB.
MAX_STRING = 16 << 20
#: Arrays nest (arrays of arrays); a hostile file could nest without end.
MAX_ARRAY_DEPTH = 8
#: How many elements of an array are decoded and kept; the rest are only walked.
ARRAY_HEAD = 16
#: Arrays nested deeper than this keep no head: 16 heads of 16 heads of ... would let a small file
#: make millions of objects.
HEAD_DEPTH = 2
#: Most text (keys, string values, tensor names) one header may make us keep in memory: with the
#: read window this keeps a hostile header under 64 MiB however many long strings it holds.
MAX_KEPT_TEXT = 24 << 20
#: Most arrays one header may hold (nested ones included): each is walked in Python, so a header of
#: millions of tiny nested arrays would take minutes. Real files hold a few dozen.
MAX_ARRAYS = 1 << 16
#: Most metadata pairs one file may hold. Real models hold a few dozen; each pair is parsed in Python
#: and kept, so two million tiny ones (a 42 MB file) took 30 s and 400 MiB.
MAX_METADATA = 1 << 16
#: Most strings all the arrays of one header may hold together. A big vocabulary and its merges are
#: under a million; each string is walked in Python (0.2 us), so a 1 GB header of empty strings
#: would take half a minute.
MAX_ARRAY_STRINGS = 1 << 22
#: Most tensors one file may describe. Real models hold a few thousand at most (experts are merged
#: into 3-D tensors); each entry is parsed in Python, so millions of tiny entries would take seconds.
MAX_TENSORS = 1 << 16
_INT64_MAX = (1 << 63) - 1
_CHUNK = 1 << 20

SCALAR_FORMATS: Mapping[GGUFValueType, struct.Struct] = {
    GGUFValueType.UINT8: struct.Struct("<B"), GGUFValueType.INT8: struct.Struct("<b"),
    GGUFValueType.UINT16: struct.Struct("<H"), GGUFValueType.INT16: struct.Struct("<h"),
    GGUFValueType.UINT32: struct.Struct("<I"), GGUFValueType.INT32: struct.Struct("<i"),
    GGUFValueType.FLOAT32: struct.Struct("<f"), GGUFValueType.BOOL: struct.Struct("<?"),
    GGUFValueType.UINT64: struct.Struct("<Q"), GGUFValueType.INT64: struct.Struct("<q"),
    GGUFValueType.FLOAT64: struct.Struct("<d"),
}
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")
# The fewest bytes one metadata pair / tensor info / array element can take, for count checks.
_MIN_KV_BYTES = 8 + 4 + 1
_MIN_TENSOR_INFO_BYTES = 8 + 4 + 8 + 4 + 8
_MIN_ELEMENT_BYTES = {GGUFValueType.STRING: 8, GGUFValueType.ARRAY: 12}

SPLIT_NAME = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


@dataclass(frozen=True)
class ArrayValue:
    """A metadata array: its element type and count, and the first few elements decoded."""

    elem_type: GGUFValueType
    count: int
    head: tuple[Any, ...]


@dataclass(frozen=True)
class MetaValue:
    """A typed metadata value and the file offset where its value starts."""

    type: GGUFValueType
    value: Any
    offset: int
    nbytes: int = field(default=0, compare=False)  # of the value's encoding in the file, from offset


@dataclass(frozen=True)
class Tensor:
    """One tensor: where its data is in which file, and its row geometry."""

    name: str
    ggml_type: GGMLQuantizationType
    shape: tuple[int, ...]
    offset: int
    nbytes: int
    row_bytes: int
    n_rows: int
    path: str
    info_offset: int = field(default=0, compare=False)

    @property
    def block_size(self) -> int:
        return layout_of(self.ggml_type).block_size

    @property
    def block_bytes(self) -> int:
        return layout_of(self.ggml_type).block_bytes

    @property
    def n_cols(self) -> int:
        return self.shape[0]

    @property
    def blocks_per_row(self) -> int:
        return self.shape[0] // self.block_size

    @property
    def end(self) -> int:
        return self.offset + self.nbytes

    def row_offset(self, row: int) -> int:
        """Absolute file offset of *row* (an index along ne1 x ne2 x ne3)."""
        if not 0 <= row < self.n_rows:
            raise UsageError(self.path, f"row {row} is outside 0..{self.n_rows - 1}", field=self.name)
        return self.offset + row * self.row_bytes


@dataclass(frozen=True)
class GGUFFile:
    """One validated GGUF file."""

    path: str
    size: int
    version: int
    alignment: int
    data_offset: int
    metadata: Mapping[str, MetaValue]
    tensors: tuple[Tensor, ...]
    identity: FileIdentity
    #: Where the tensor infos end: the bytes from here to ``data_offset`` are alignment padding.
    header_end: int
    #: The reads the header was parsed from: (offset, length, xxh3-128 of the bytes), in order. Every byte the
    #: layout rests on is in one ending at or before ``header_end``; the rest of a window read ahead is one of
    #: its own: ``check`` confirms them against what its passes delivered.
    header_reads: tuple[tuple[int, int, str], ...] = ()

    def meta(self, key: str, default: Any = None) -> Any:
        entry = self.metadata.get(key)
        return default if entry is None else entry.value

    @cached_property
    def metadata_values(self) -> Mapping[str, Any]:
        """The metadata as plain Python values (:class:`MetadataValues`), beside the typed ``metadata``."""
        return MetadataValues(self)

    def check_unchanged(self, when: str) -> None:
        """ReadError if this file was replaced, resized or rewritten since it was opened."""
        self.identity.check(self.path, when)


@dataclass(frozen=True)
class Model:
    """A model: one GGUF file, or every shard of a split set, with all tensors in file order."""

    source: str
    files: tuple[GGUFFile, ...]
    tensors: tuple[Tensor, ...]

    @property
    def metadata(self) -> Mapping[str, MetaValue]:
        """The (first) file's metadata, typed: each key's :class:`MetaValue` (GGUF type, value, file offset; an
        array as an :class:`ArrayValue`, its length and first elements). Plain values: :attr:`metadata_values`."""
        return self.files[0].metadata

    @property
    def metadata_values(self) -> Mapping[str, Any]:
        """The (first) file's metadata as plain Python values, read-only: ``int``, ``float``, ``bool``, ``str``,
        and every array as a tuple of all its elements (``len(values["tokenizer.ggml.tokens"])``), read from the
        file when first asked for (:class:`MetadataValues`)."""
        return self.files[0].metadata_values

    @property
    def architecture(self) -> str | None:
        value = self.files[0].meta("general.architecture")
        return value if isinstance(value, str) else None

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def tensor(self, name: str) -> Tensor:
        for t in self.tensors:
            if t.name == name:
                return t
        raise UsageError(self.source, f"no tensor named {name!r}", field="tensor")


class MetadataValues(Mapping[str, Any]):
    """One file's metadata as plain Python values, read-only, in the header's order: a scalar or string as the
    typed mapping holds it; an array as a tuple of every element (an array of arrays: tuples of tuples). The header
    parse keeps only an array's length and first elements (a vocabulary opens without decoding its strings), so an
    array longer than its head is read again from its bytes in the file when first asked for, then kept. A file
    replaced or rewritten since it was opened is a :class:`ReadError`, not another file's values."""

    def __init__(self, f: GGUFFile) -> None:
        self._file = f
        self._arrays: dict[str, tuple[Any, ...]] = {}

    def __getitem__(self, key: str) -> Any:
        entry = self._file.metadata[key]
        if not isinstance(entry.value, ArrayValue):
            return entry.value
        if key not in self._arrays:
            self._arrays[key] = _complete_head(entry.value) or _read_array_values(self._file, key, entry)
        return self._arrays[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._file.metadata)

    def __len__(self) -> int:
        return len(self._file.metadata)

    def __repr__(self) -> str:
        return f"MetadataValues({self._file.path!r}, {len(self)} keys)"


def _complete_head(array: ArrayValue) -> tuple[Any, ...] | None:
    """The array's elements when its head holds all of them and none is an array (no read needed), else None."""
    whole = len(array.head) == array.count and array.elem_type is not GGUFValueType.ARRAY
    return array.head if whole else None


def _read_array_values(f: GGUFFile, key: str, entry: MetaValue) -> tuple[Any, ...]:
    """Every element of the array ``entry`` from the file's bytes, the file checked to be the one opened before
    and after the read (the parse already bounded every length in them)."""
    f.check_unchanged("since it was opened")
    fd, _ = opening.open_readonly(f.path)
    try:
        data = positioned.pread(fd, entry.nbytes, entry.offset)
    except OSError as err:
        raise ReadError.for_os_error(f.path, f"read failed: {err.strerror}", err, offset=entry.offset,
                                     field=key) from None
    finally:
        os.close(fd)
    f.check_unchanged("while its metadata was read")
    if len(data) < entry.nbytes:
        raise ReadError(f.path, "file shrank while its metadata was read", offset=entry.offset + len(data), field=key)
    values, _ = _array_elements(data, 0)
    return values


def _array_elements(data: bytes, pos: int) -> tuple[tuple[Any, ...], int]:
    """The elements of the array whose element type and count start at ``pos``, and the offset after it."""
    etype, count = struct.unpack_from("<IQ", data, pos)
    pos += 12
    et = GGUFValueType(etype)
    if et is GGUFValueType.ARRAY:
        arrays = []
        for _ in range(count):
            inner, pos = _array_elements(data, pos)
            arrays.append(inner)
        return tuple(arrays), pos
    if et is GGUFValueType.STRING:
        strings = []
        for _ in range(count):
            (n,) = _U64.unpack_from(data, pos)
            # As the parse decodes them: an invalid byte stays distinct from the same text spelled out.
            strings.append(data[pos + 8:pos + 8 + n].decode("utf-8", errors="surrogateescape"))
            pos += 8 + n
        return tuple(strings), pos
    fmt = SCALAR_FORMATS[et]
    return struct.unpack_from(f"<{count}{fmt.format[1:]}", data, pos), pos + count * fmt.size


#: Reads ``length`` bytes at ``offset`` of the file being parsed (fewer only at its end).
HeaderRead = Callable[[int, int], bytes]


class _Cursor:
    """Reads a header sequentially through a bounded window, checking every length against EOF; each window
    read is recorded (``reads``: offset, length, xxh3-128)."""

    def __init__(self, fd: int, path: str, size: int, read: HeaderRead | None = None) -> None:
        self.fd, self.path, self.size = fd, path, size
        self.read: HeaderRead = read or (lambda offset, n: positioned.pread(fd, n, offset))
        self.reads: list[tuple[int, int, str]] = []
        self.buf = b""
        self.base = 0
        self.pos = 0
        self.kept = 0
        self.arrays = 0
        self.strings = 0

    def error(self, field: str, message: str, offset: int | None = None) -> FormatError:
        return FormatError(self.path, message, offset=self.pos if offset is None else offset, field=field)

    def require(self, n: int, field: str) -> None:
        """Make sure *n* bytes at pos exist in the file and sit in the window."""
        remaining = self.size - self.pos
        if n > remaining:
            raise self.error(field, f"needs {n} bytes but the file has {remaining} left (truncated?)")
        if self.base <= self.pos and self.pos + n <= self.base + len(self.buf):
            return
        want = max(n, _CHUNK)
        try:
            data = self.read(self.pos, min(want, remaining))
        except OSError as err:
            raise ReadError.for_os_error(self.path, f"read failed: {err.strerror}", err, offset=self.pos) from None
        if len(data) < n:
            raise ReadError(self.path, "file shrank while reading the header", offset=self.pos + len(data))
        self.done()
        self.buf, self.base = data, self.pos

    def done(self) -> None:
        """Record the window's bytes the parse went through (``reads``), before it is replaced or the parse ends:
        those the layout rests on, not the rest of a window read ahead."""
        used = min(max(self.pos - self.base, 0), len(self.buf))
        if used:
            self.reads.append((self.base, used, xxhash.xxh3_128_hexdigest(self.buf[:used])))
            if used < len(self.buf):    # the rest of the window, read ahead: not used, but read all the same
                self.reads.append((self.base + used, len(self.buf) - used,
                                   xxhash.xxh3_128_hexdigest(self.buf[used:])))

    def unpack(self, fmt: struct.Struct, field: str) -> Any:
        self.require(fmt.size, field)
        (value,) = fmt.unpack_from(self.buf, self.pos - self.base)
        self.pos += fmt.size
        return value

    def skip(self, n: int, field: str) -> None:
        if n > self.size - self.pos:
            raise self.error(field, f"needs {n} bytes but the file has {self.size - self.pos} left (truncated?)")
        self.pos += n

    def string(self, field: str) -> str:
        start = self.pos
        n = self.unpack(_U64, field)
        if n > MAX_STRING:
            raise self.error(field, f"string length {n} is absurd (limit {MAX_STRING})", start)
        if n > self.size - self.pos:
            raise self.error(field, f"string length {n} runs past the end of the file", start)
        self.require(n, field)
        off = self.pos - self.base
        self.pos += n
        # surrogateescape keeps an invalid byte distinct from the same text spelled out (b"\xff" is not
        # b"\\xff"): duplicate checks compare what the file holds, and escape() shows the byte as \xff.
        return self.buf[off:off + n].decode("utf-8", errors="surrogateescape")

    def kept_string(self, field: str) -> str:
        """A string the caller keeps: counted against MAX_KEPT_TEXT."""
        start = self.pos
        text = self.string(field)
        self.kept += self.pos - start - 8
        if self.kept > MAX_KEPT_TEXT:
            raise self.error(field, f"the header's strings total more than {MAX_KEPT_TEXT} bytes", start)
        return text

    def skip_strings(self, count: int, field: str) -> None:
        """Walk *count* strings without decoding them: the hot loop of opening a big vocabulary."""
        left = count
        unpack_from = _U64.unpack_from
        # numpy walks a window's short strings at once; used only when already loaded (by the caller's
        # scan or rows, say): importing it costs more than it saves on one vocabulary.
        np = sys.modules.get("numpy") if count >= _VECTOR_MIN_STRINGS else None
        while left:
            self.require(8, field)
            buf, rel = self.buf, self.pos - self.base
            if np is not None:
                rel, walked = _walk_short_strings(np, buf, rel, left)
                self.pos, left = self.base + rel, left - walked
                if not left:
                    break
            prev, walked = rel, 0
            # Nothing but the walk in the loop: it runs once per vocabulary entry. A length field that
            # crosses the window's end (or an absurd length) ends it with an exception, a string that
            # crosses it is caught after; both are then taken by the checked slow path below.
            try:
                for walked in range(left):      # noqa: B007 (read after the loop: how far the walk got)
                    n = unpack_from(buf, rel)[0]
                    prev = rel
                    rel += 8 + n
                walked = left
            except (struct.error, OverflowError):
                pass
            if rel > len(buf):                  # the last string walked runs past the window
                rel, walked = prev, walked - 1
            self.pos, left = self.base + rel, left - walked
            if left:
                self.string(field)  # crosses the window edge: the checked slow path
                left -= 1


#: Strings in an array from which skip_strings walks them with numpy (below, setting it up costs more).
_VECTOR_MIN_STRINGS = 4096


def _walk_short_strings(np: Any, buf: bytes, rel: int, left: int) -> tuple[int, int]:
    """Walk up to ``left`` strings of ``buf`` from offset ``rel`` as the sequential walk does (each is a u64
    length and that many bytes), taking only strings that lie wholly in ``buf``: (new offset, strings
    walked). Every string shorter than 256 bytes has a header whose bytes 1..7 are zero, so the window's
    candidate headers are found at once and the walk goes from one to the next while each string ends
    exactly where the next candidate starts; the rest (a longer string, a candidate that was only zeros
    inside a string) is stepped over one at a time. The caller's checked loop takes over where this stops."""
    end = len(buf)
    if end - rel < 8:
        return rel, 0
    heads = np.ndarray((end - rel - 7,), dtype="<u8", buffer=buf, offset=rel, strides=(1,))
    cand = np.flatnonzero(heads < 256) + rel                     # where a string shorter than 256 may start
    nxt = cand + 8 + np.frombuffer(buf, np.uint8)[cand]          # where it would end
    breaks = np.flatnonzero(nxt[:-1] != cand[1:])               # candidates not followed by the next one
    last = len(cand) - 1
    pos, walked = rel, 0
    i = int(np.searchsorted(cand, pos))
    while walked < left:
        if i <= last and int(cand[i]) == pos:
            k = int(np.searchsorted(breaks, i))
            run = (int(breaks[k]) if k < len(breaks) else last) - i    # strings that end on the next candidate
            step = min(run, left - walked)
            if step:
                i += step
                walked += step
                pos = int(cand[i])
                continue
            target = int(nxt[i])
        elif pos + 8 <= end:
            target = pos + 8 + _U64.unpack_from(buf, pos)[0]
        else:
            break
        if target > end:
            break
        pos, walked = target, walked + 1
        i = int(np.searchsorted(cand, pos))
    return pos, walked


def _read_value(cur: _Cursor, vtype: int, field: str, depth: int = 0) -> Any:
    try:
        vt = GGUFValueType(vtype)
    except ValueError:
        raise cur.error(field, f"unknown metadata value type {vtype}", cur.pos - 4) from None
    if vt is GGUFValueType.STRING:
        return cur.kept_string(field)
    if vt is GGUFValueType.ARRAY:
        return _read_array(cur, field, depth + 1)
    return cur.unpack(SCALAR_FORMATS[vt], field)


def _read_array(cur: _Cursor, field: str, depth: int) -> ArrayValue:
    if depth > MAX_ARRAY_DEPTH:
        raise cur.error(field, f"arrays nested deeper than {MAX_ARRAY_DEPTH}")
    cur.arrays += 1
    if cur.arrays > MAX_ARRAYS:
        raise cur.error(field, f"the header holds more than {MAX_ARRAYS} arrays")
    etype = cur.unpack(_U32, field)
    count_at = cur.pos
    count = cur.unpack(_U64, field)
    try:
        et = GGUFValueType(etype)
    except ValueError:
        raise cur.error(field, f"unknown array element type {etype}", count_at - 4) from None
    min_size = _MIN_ELEMENT_BYTES.get(et) or SCALAR_FORMATS[et].size
    if count > (cur.size - cur.pos) // min_size:
        raise cur.error(field, f"array of {count} elements cannot fit in the {cur.size - cur.pos} bytes left",
                        count_at)
    if et is GGUFValueType.STRING:
        cur.strings += count
        if cur.strings > MAX_ARRAY_STRINGS:
            raise cur.error(field, f"the header's arrays hold more than {MAX_ARRAY_STRINGS} strings", count_at)
    head_n = min(count, ARRAY_HEAD) if depth <= HEAD_DEPTH else 0
    head = tuple(_read_value(cur, etype, f"{field}[{i}]", depth) for i in range(head_n))
    rest = count - head_n
    if et is GGUFValueType.STRING:
        cur.skip_strings(rest, field)
    elif et is GGUFValueType.ARRAY:
        for i in range(head_n, count):
            _read_value(cur, etype, f"{field}[{i}]", depth)
    else:
        cur.skip(rest * SCALAR_FORMATS[et].size, field)
    return ArrayValue(et, count, head)


def _read_metadata(cur: _Cursor, count: int) -> dict[str, MetaValue]:
    metadata: dict[str, MetaValue] = {}
    for i in range(count):
        key_at = cur.pos
        key = cur.kept_string(f"metadata[{i}].key")
        if key in metadata:
            raise cur.error(f"metadata[{key}]", "duplicate metadata key", key_at)
        vtype = cur.unpack(_U32, f"metadata[{key}].type")
        value_at = cur.pos
        value = _read_value(cur, vtype, f"metadata[{key}]")
        metadata[key] = MetaValue(GGUFValueType(vtype), value, value_at, cur.pos - value_at)
    return metadata


@dataclass
class _RawTensor:
    name: str
    info_offset: int
    shape: tuple[int, ...]
    ggml_type: GGMLQuantizationType
    rel_offset: int
    offset_at: int
    nbytes: int
    row_bytes: int


def _read_tensor_info(cur: _Cursor, index: int, alignment: int) -> _RawTensor:
    info_at = cur.pos
    name = cur.kept_string(f"tensor[{index}].name")
    label = f"tensor[{name}]"
    n_dims_at = cur.pos
    n_dims = cur.unpack(_U32, f"{label}.n_dims")
    if not 1 <= n_dims <= MAX_DIMS:
        raise cur.error(f"{label}.n_dims", f"n_dims {n_dims} is outside 1..{MAX_DIMS}", n_dims_at)
    shape = []
    elements = 1
    for d in range(n_dims):
        ne_at = cur.pos
        ne = cur.unpack(_I64, f"{label}.ne[{d}]")
        if ne <= 0:
            raise cur.error(f"{label}.ne[{d}]", f"dimension {ne} is not positive", ne_at)
        elements *= ne
        if elements > _INT64_MAX:
            raise cur.error(f"{label}.ne[{d}]", "dimensions overflow 64 bits", ne_at)
        shape.append(ne)
    type_at = cur.pos
    type_id = cur.unpack(_U32, f"{label}.type")
    ggml_type = known_type(type_id)
    if ggml_type is None:
        raise cur.error(f"{label}.type", f"unknown GGML type {type_id}", type_at)
    facts = layout_of(ggml_type)
    if shape[0] % facts.block_size:
        raise cur.error(f"{label}.ne[0]", f"ne0 {shape[0]} is not a multiple of the {ggml_type.name} "
                        f"block size {facts.block_size}", n_dims_at + 4)
    offset_at = cur.pos
    rel = cur.unpack(_U64, f"{label}.offset")
    if rel % alignment:
        raise cur.error(f"{label}.offset", f"data offset {rel} is not aligned to {alignment}", offset_at)
    row_bytes = shape[0] // facts.block_size * facts.block_bytes
    return _RawTensor(name, info_at, tuple(shape), ggml_type, rel, offset_at,
                      row_bytes * (elements // shape[0]), row_bytes)


def _alignment(cur: _Cursor, metadata: Mapping[str, MetaValue]) -> int:
    entry = metadata.get("general.alignment")
    if entry is None:
        return DEFAULT_ALIGNMENT
    if entry.type is not GGUFValueType.UINT32:
        # As ggml's gguf.cpp (gguf_init_from_reader: "key 'general.alignment' must be of type u32"): any other
        # type is refused, not converted, since llama.cpp will not load such a file at all.
        raise cur.error("general.alignment", f"alignment is stored as {entry.type.name.lower()}; GGUF requires "
                                             "uint32", entry.offset)
    value = int(entry.value)
    if value <= 0 or value & (value - 1):
        raise cur.error("general.alignment", f"alignment {value} is not a power of two", entry.offset)
    return value


def _check_version(cur: _Cursor) -> int:
    version = cur.unpack(_U32, "version")
    if version in SUPPORTED_VERSIONS:
        return int(version)
    if int.from_bytes(version.to_bytes(4, "little"), "big") in (1, 2, 3):
        raise cur.error("version", "big-endian GGUF files are not supported", 4)
    raise cur.error("version", f"unsupported GGUF version {version} (supported: 2, 3)", 4)


def _check_magic(cur: _Cursor) -> None:
    """FormatError at offset 0 unless the file begins with ``GGUF``: a file too short to hold it that begins
    as a GGUF does is cut short; any other says its first bytes, and what they are when a signature knows."""
    cur.require(min(cur.size, len(GGUF_MAGIC)), "magic")
    head = cur.buf[:signatures.HEAD]
    if head.startswith(GGUF_MAGIC):
        return
    if GGUF_MAGIC.startswith(head):
        cur.require(len(GGUF_MAGIC), "magic")      # raises: the file ends inside the magic
    raise cur.error("magic", signatures.not_gguf(head, cur.size, GGUF_MAGIC), 0)


def _parse(cur: _Cursor) -> tuple[int, int, int, int, dict[str, MetaValue], list[_RawTensor]]:
    _check_magic(cur)
    cur.pos = 4
    version = _check_version(cur)
    n_tensors = cur.unpack(_U64, "tensor_count")
    n_kv = cur.unpack(_U64, "metadata_kv_count")
    remaining = cur.size - cur.pos
    if n_kv > remaining // _MIN_KV_BYTES:
        raise cur.error("metadata_kv_count", f"{n_kv} metadata pairs cannot fit in {remaining} bytes", 16)
    if n_tensors > remaining // _MIN_TENSOR_INFO_BYTES:
        raise cur.error("tensor_count", f"{n_tensors} tensors cannot fit in {remaining} bytes", 8)
    if n_tensors > MAX_TENSORS:
        raise cur.error("tensor_count", f"{n_tensors} tensors is more than ggaudit reads (limit {MAX_TENSORS})", 8)
    if n_kv > MAX_METADATA:
        raise cur.error("metadata_kv_count", f"{n_kv} metadata pairs is more than ggaudit reads (limit "
                        f"{MAX_METADATA})", 16)
    metadata = _read_metadata(cur, n_kv)
    alignment = _alignment(cur, metadata)
    if n_tensors > (cur.size - cur.pos) // _MIN_TENSOR_INFO_BYTES:
        raise cur.error("tensor_count", f"{n_tensors} tensors cannot fit in the {cur.size - cur.pos} "
                        "bytes after the metadata", 8)
    raw = [_read_tensor_info(cur, i, alignment) for i in range(n_tensors)]
    data_offset = -(-cur.pos // alignment) * alignment
    return version, alignment, cur.pos, data_offset, metadata, raw


def _place_tensors(cur: _Cursor, raw: list[_RawTensor], data_offset: int) -> tuple[Tensor, ...]:
    seen: dict[str, _RawTensor] = {}
    for t in raw:
        if t.name in seen:
            raise cur.error(f"tensor[{t.name}]", "duplicate tensor name", t.info_offset)
        seen[t.name] = t
        end = data_offset + t.rel_offset + t.nbytes
        if end > cur.size:
            raise cur.error(f"tensor[{t.name}].offset", f"tensor data [{data_offset + t.rel_offset}, {end}) "
                            f"runs past the end of the file ({cur.size} bytes)", t.offset_at)
    ordered = sorted(raw, key=lambda t: t.rel_offset)
    for before, after in itertools.pairwise(ordered):
        if after.rel_offset < before.rel_offset + before.nbytes:
            raise cur.error(f"tensor[{after.name}].offset", f"tensor data overlaps tensor {before.name!r}",
                            after.offset_at)
    return tuple(
        Tensor(t.name, t.ggml_type, t.shape, data_offset + t.rel_offset, t.nbytes, t.row_bytes,
               t.nbytes // t.row_bytes, cur.path, t.info_offset)
        for t in raw)


#: How a file's header is read, given its path: None for positioned reads through the page cache (the
#: default); else the reads of another read path (``check`` plans again from the bytes its passes decided).
HeaderReads = Callable[[str], HeaderRead | None] | None


def open_gguf(path: str | os.PathLike[str], header_read: HeaderReads = None) -> GGUFFile:
    """Open one GGUF file read-only and return its validated layout; FormatError if malformed.
    ``header_read(path)``: how its header is read, when not by positioned reads of the file."""
    path = opening.fs_path(path)     # UsageError, not AttributeError later, for bytes or a non-path
    fd, st = opening.open_readonly(path)
    try:
        cur = _Cursor(fd, path, st.st_size, None if header_read is None else header_read(path))
        version, alignment, header_end, data_offset, metadata, raw = _parse(cur)
        tensors = _place_tensors(cur, raw, data_offset)
        cur.done()
    finally:
        os.close(fd)
    return GGUFFile(path, st.st_size, version, alignment, data_offset, MappingProxyType(metadata), tensors,
                    FileIdentity.of(st), header_end, tuple(cur.reads))


def open_model(source: str | os.PathLike[str], header_read: HeaderReads = None) -> Model:
    """Open a GGUF file, or a whole split set given any of its shards, as one model (``header_read``: how
    each file's header is read, as :func:`open_gguf` takes it).

    Raises:
        UsageError: ``source`` is no str or ``os.PathLike[str]``.
        FormatError: a file that is no well-formed GGUF, or shards that do not make one split set (a shard
            missing included: the set is incomplete, not a file not found), naming the offset and the field.
        ReadError: a file that cannot be opened or read (a folder, no regular file, a path holding NUL), or
            that changed while its header was read. One the OS
            refused is also the standard exception of that error (``FileNotFoundError``, ``PermissionError``,
            else ``OSError``, with ``errno``, ``strerror`` and ``filename``).
    """
    path = opening.fs_path(source)
    first = open_gguf(path, header_read)
    count = first.meta("split.count")
    if not isinstance(count, int) or count <= 1:
        return Model(path, (first,), first.tensors)
    return _open_split(path, first, count, header_read)


def named_shards(path: str) -> list[str] | None:
    """Paths of all shards of the split set ``path``'s name says it belongs to (``NAME-0000k-of-0000n.gguf``),
    from the name alone; None when it is not such a name."""
    folder, base = os.path.split(path)
    match = SPLIT_NAME.match(base)
    if match is None:
        return None
    count = int(match["count"])
    return [os.path.join(folder, f"{match['prefix']}-{k:05d}-of-{count:05d}.gguf") for k in range(1, count + 1)]


def shard_paths(f: GGUFFile, count: int) -> list[str]:
    """Paths of all shards of the split set *f* belongs to (from its name, checked against split.count)."""
    shards = named_shards(f.path)
    entry = f.metadata["split.count"]
    if shards is None:
        raise FormatError(f.path, f"split.count is {count} but the name is not NAME-0000k-of-0000n.gguf",
                          offset=entry.offset, field="split.count")
    if len(shards) != count:
        raise FormatError(f.path, f"the name says {len(shards)} shards but split.count is {count}",
                          offset=entry.offset, field="split.count")
    return shards


def _open_split(path: str, given: GGUFFile, count: int, header_read: HeaderReads = None) -> Model:
    files = []
    roots = sibling_roots(path)
    for k, shard in enumerate(shard_paths(given, count)):
        is_given = os.path.abspath(shard) == os.path.abspath(path)
        # A shard found by name is only opened if it stays in the folder (its first bytes would be
        # quoted in an error otherwise); the shard the user named is theirs to name.
        problem = None if is_given else confine(shard, roots)
        if problem is not None:
            said = f"{OUTSIDE} the folder (a link pointing out): not opened" if problem == OUTSIDE else problem
            raise FormatError(shard, f"shard {k + 1} of {count} {said}", field="split")
        if not os.path.exists(shard):
            raise FormatError(shard, f"shard {k + 1} of {count} is missing", field="split")
        f = given if is_given else open_gguf(shard, header_read)
        _check_shard(f, k, count, given)
        files.append(f)
    tensors = tuple(t for f in files for t in f.tensors)
    _check_split_tensors(files, tensors)
    return Model(path, tuple(files), tensors)


def _check_shard(f: GGUFFile, index: int, count: int, given: GGUFFile) -> None:
    def expect(key: str, wanted: Any, what: str) -> None:
        entry = f.metadata.get(key)
        if entry is None:
            raise FormatError(f.path, f"shard has no {key} key", field=key)
        if entry.value != wanted:
            raise FormatError(f.path, f"{key} is {entry.value!r} but {what} {wanted!r} (shards from "
                              "different sets?)", offset=entry.offset, field=key)

    expect("split.no", index, "its position in the set is")
    expect("split.count", count, "the set has")
    expect("split.tensors.count", given.meta("split.tensors.count"), "the given shard says")


def _check_split_tensors(files: list[GGUFFile], tensors: tuple[Tensor, ...]) -> None:
    first = files[0]
    entry = first.metadata["split.tensors.count"]
    if entry.value != len(tensors):
        raise FormatError(first.path, f"split.tensors.count is {entry.value} but the shards hold "
                          f"{len(tensors)} tensors", offset=entry.offset, field="split.tensors.count")
    seen: dict[str, str] = {}
    for t in tensors:
        if t.name in seen:
            raise FormatError(t.path, f"tensor also stored in {seen[t.name]}", offset=t.info_offset,
                              field=f"tensor[{t.name}]")
        seen[t.name] = t.path
