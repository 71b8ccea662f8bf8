"""Compare two GGUF files' metadata key by key, on the bytes each value is stored as.

The layout keeps scalars, strings and the first elements of arrays; comparing the stored bytes (streamed
in chunks) also covers the rest of a long array, such as a 256k-entry vocabulary. For an array that
differs, the first differing element is found and read back from both files.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any, ClassVar
from collections.abc import Callable, Iterator

from ..format.blocks import GGUFValueType as V
from ..format.info import value_to_json
from ..format.layout import SCALAR_FORMATS, ArrayValue, GGUFFile, MetaValue
from ..json_shape import json_key, json_record, to_json

#: Reads ``length`` bytes of ``path`` at ``offset`` (the caller owns the descriptors).
ReadFn = Callable[[str, int, int], bytes]
#: Bytes of a file: its path, the offset and the length.
Span = tuple[str, int, int]

CHUNK_BYTES = 1 << 20
#: The most bytes of a differing string element read back to show it.
SHOWN_BYTES = 256
_ARRAY_HEAD = 12  # element type (u32) and count (u64) before an array's elements
_U64 = struct.Struct("<Q")
#: A metadata value in the JSON (``info --json``'s), or null where absent.
_VALUE = {"anyOf": [{"$ref": "#/$defs/meta_value"}, {"type": "null"}]}


@json_record
class MetadataChange:
    """One key that differs: present in one file only, stored as another type, or with another value."""

    JSON_DEF: ClassVar[str] = "metadata_change"

    key: str
    what: str = json_key(values=("only-in-a", "only-in-b", "type", "value"))
    type_a: str | None         # "uint32", "string", "array of string", ...; None where absent
    type_b: str | None
    #: As the layout keeps it (an array: ArrayValue); None where absent. In the JSON as ``info --json``
    #: shows values: arrays as {array_of, count, head}, NaN and Inf as text.
    value_a: Any = json_key(convert=value_to_json, schema=_VALUE)
    value_b: Any = json_key(convert=value_to_json, schema=_VALUE)
    offset_a: int | None = json_key(minimum=0)      # file offset of the stored value
    offset_b: int | None = json_key(minimum=0)
    #: Arrays: the first element that differs (or the shorter count).
    element: int | None = json_key(default=None, minimum=0)
    #: That element on each side; None past the end (strings: at most SHOWN_BYTES of them).
    element_a: Any = json_key(default=None, convert=value_to_json, schema=_VALUE)
    element_b: Any = json_key(default=None, convert=value_to_json, schema=_VALUE)

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


def diff_metadata(a: GGUFFile, b: GGUFFile, read: ReadFn, chunk_bytes: int = CHUNK_BYTES
                  ) -> tuple[MetadataChange, ...]:
    """Every key whose presence, type or stored bytes differ, in A's key order, then B's own keys."""
    out: list[MetadataChange] = []
    for key, ma in a.metadata.items():
        mb = b.metadata.get(key)
        if mb is None:
            out.append(_change(key, "only-in-a", ma, None))
        elif type_name(ma) != type_name(mb):
            out.append(_change(key, "type", ma, mb))
        elif (at := _first_difference(read, a.path, ma, b.path, mb, chunk_bytes)) is not None:
            out.append(_value_change(key, read, a.path, ma, b.path, mb, at, chunk_bytes))
    out += [_change(key, "only-in-b", None, mb) for key, mb in b.metadata.items() if key not in a.metadata]
    return tuple(out)


def _change(key: str, what: str, ma: MetaValue | None, mb: MetaValue | None) -> MetadataChange:
    """A change of ``key`` between its value in A and in B (None: the key is absent on that side)."""
    return MetadataChange(key=key, what=what, type_a=None if ma is None else type_name(ma),
                          type_b=None if mb is None else type_name(mb), value_a=None if ma is None else ma.value,
                          value_b=None if mb is None else mb.value, offset_a=None if ma is None else ma.offset,
                          offset_b=None if mb is None else mb.offset)


def type_name(m: MetaValue) -> str:
    """How a value is stored: "uint32", "string", "array of float32", ..."""
    if isinstance(m.value, ArrayValue):
        return f"array of {m.value.elem_type.name.lower()}"
    return m.type.name.lower()


def _first_difference(read: ReadFn, path_a: str, ma: MetaValue, path_b: str, mb: MetaValue,
                      chunk_bytes: int, skip: int = 0) -> int | None:
    """The first byte (from the value's start) at which the stored values differ, or where the shorter
    one ends; None when they are the same bytes. *skip* leading bytes are not compared."""
    return first_difference(read, (path_a, ma.offset, ma.nbytes), (path_b, mb.offset, mb.nbytes), chunk_bytes, skip)


def first_difference(read: ReadFn, a: Span, b: Span, chunk_bytes: int = CHUNK_BYTES, skip: int = 0) -> int | None:
    """The first byte (from their starts) at which two spans of bytes differ, or where the shorter one
    ends; None when they are the same bytes. Read ``chunk_bytes`` at a time, so a span of any length
    is compared in bounded memory; *skip* leading bytes are not compared."""
    (path_a, offset_a, length_a), (path_b, offset_b, length_b) = a, b
    common = min(length_a, length_b)
    for at in range(skip, common, chunk_bytes):
        n = min(chunk_bytes, common - at)
        xa, xb = read(path_a, offset_a + at, n), read(path_b, offset_b + at, n)
        if xa != xb:
            return at + _first_unequal(xa, xb)
    return None if length_a == length_b else common


def _first_unequal(xa: bytes, xb: bytes) -> int:
    """The first index at which two unequal byte strings of one length differ: halving, each step one
    memcmp of the half still in doubt (a byte-by-byte loop over a 4 MiB chunk takes a second)."""
    lo, hi = 0, len(xa)         # xa[:lo] == xb[:lo], and a byte of [lo, hi) differs
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if xa[lo:mid] == xb[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _value_change(key: str, read: ReadFn, path_a: str, ma: MetaValue, path_b: str, mb: MetaValue,
                  at: int, chunk_bytes: int) -> MetadataChange:
    change = _change(key, "value", ma, mb)
    if not isinstance(ma.value, ArrayValue) or ma.value.elem_type is V.ARRAY:
        return change  # a scalar or string shows whole; nested arrays are not taken apart
    # Counts may differ with the elements equal as far as both go: compare the elements themselves.
    where = _first_difference(read, path_a, ma, path_b, mb, chunk_bytes, skip=_ARRAY_HEAD) \
        if at < _ARRAY_HEAD else at
    if where is None or where >= min(ma.nbytes, mb.nbytes):
        index = min(ma.value.count, mb.value.count)
    else:
        index = _element_at(read, path_a, ma, where, chunk_bytes)
    return dataclasses.replace(change, element=index, element_a=_element(read, path_a, ma, index, chunk_bytes),
                               element_b=_element(read, path_b, mb, index, chunk_bytes))


def _element_at(read: ReadFn, path: str, m: MetaValue, at: int, chunk_bytes: int) -> int:
    """The index of the element holding byte *at* of the stored array (the bytes before it are equal on
    both sides, so the index is the same in the other file)."""
    fmt = SCALAR_FORMATS.get(m.value.elem_type)
    if fmt is not None:
        return (at - _ARRAY_HEAD) // fmt.size
    index = 0
    for index, (length, start) in enumerate(_strings(read, path, m, chunk_bytes)):  # noqa: B007 - used after
        if at < start + length:
            break
    return index


def _strings(read: ReadFn, path: str, m: MetaValue, chunk_bytes: int) -> Iterator[tuple[int, int]]:
    """(length, start of its bytes) of each string of a stored string array, from lengths read in chunks."""
    pos, end = _ARRAY_HEAD, m.nbytes
    buf, buf_at = b"", pos
    while pos + 8 <= end:
        if pos + 8 > buf_at + len(buf):
            buf_at = pos
            buf = read(path, m.offset + pos, min(max(chunk_bytes, 8), end - pos))
        (length,) = _U64.unpack_from(buf, pos - buf_at)
        yield length, pos + 8
        pos += 8 + length


def _element(read: ReadFn, path: str, m: MetaValue, index: int, chunk_bytes: int) -> Any:
    """Element *index* of a stored array, read back from the file; None past its end."""
    value: ArrayValue = m.value
    if index >= value.count:
        return None
    fmt = SCALAR_FORMATS.get(value.elem_type)
    if fmt is not None:
        return fmt.unpack(read(path, m.offset + _ARRAY_HEAD + index * fmt.size, fmt.size))[0]
    for i, (length, start) in enumerate(_strings(read, path, m, chunk_bytes)):
        if i == index:
            return read(path, m.offset + start, min(length, SHOWN_BYTES)).decode("utf-8", "replace")
    return None
