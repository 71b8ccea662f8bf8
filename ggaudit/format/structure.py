"""The bytes of a GGUF file that no tensor owns: alignment padding, gaps between tensors, and whatever
follows the last tensor.

The GGUF spec leaves only two kinds of bytes outside the header and the tensors: the padding from the end
of the tensor infos to the aligned start of the data section, and the padding from each tensor's end to
the next tensor's aligned start; both must be zeros. Writers differ on the last tensor: gguf-py's
GGUFWriter and llama.cpp's gguf.cpp pad it with zeros to the alignment, Ollama's writer and ggaudit's own
builder do not. So after the last tensor, zeros up to the next multiple of the alignment are padding and
anything else is trailing data: a payload appended to a model loads and runs unnoticed.

Every region is located by file, offset and length. Padding (shorter than the alignment per region) is
read whole, in bounded chunks, to find its first non-zero byte; a gap or trailing data can be gigabytes,
so only a bounded prefix of it is read to describe it. The checks are a chunk consumer
(:class:`StructureConsumer`), so a pass that reads the whole file anyway (``scan --sha256``) feeds them
without reading any byte twice; :func:`check_structure` reads just the bytes they need.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..io import opening, positioned
from ..errors import ReadError
from ..json_shape import json_key, json_record, to_json

if TYPE_CHECKING:   # only named: scan's report types load without the header parser (`scan --help`)
    from .layout import GGUFFile

#: Padding between the header or a tensor and the next tensor holds a byte that is not zero.
PADDING = "padding"
#: Bytes between two tensors (or the data section's start and the first tensor) beyond the alignment.
GAP = "gap"
#: Bytes after the last tensor and its zero padding.
TRAILING = "trailing"

#: Most bytes of a gap or of trailing data read to describe it (its first non-zero byte).
PROBE_BYTES = 64 << 10
#: Bytes of a region shown as hex.
HEAD_BYTES = 16
#: Most bytes held in memory at once while reading padding.
_CHUNK = 1 << 20


@json_record
class StructureFinding:
    """A region of a file no tensor owns that should not be there, or should be zeros and is not.

    ``offset``/``length``: the region (absolute). ``after``/``before``: the tensors on either side (None:
    the header before, the end of the file after). ``first_nonzero``: the absolute offset of its first
    byte that is not zero, within what was read (all of a padding region, the first ``PROBE_BYTES`` of a
    gap or of trailing data), else None. ``head``: its first bytes, hex. ``expected``/``actual`` say the
    same in words, expected before actual (they hold no names, only numbers and hex).
    """

    JSON_DEF: ClassVar[str] = "structure_finding"

    kind: str = json_key(values=(PADDING, GAP, TRAILING))
    path: str = json_key(name="file")
    offset: int = json_key(minimum=0)
    length: int = json_key(minimum=1)
    after: str | None
    before: str | None
    first_nonzero: int | None = json_key(minimum=0)
    head: str = json_key(pattern=f"^([0-9a-f]{{2}}){{1,{HEAD_BYTES}}}$")
    expected: str
    actual: str

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


@dataclass
class _Span:
    """A region of the file no tensor owns, and what has been seen of its bytes.

    ``zeros_end``: for the bytes after the last tensor, where its allowed zero padding ends (the finding
    starts at the first byte that is not such padding); for padding and gaps, ``start``. ``watch_end``:
    how far its bytes are looked at.
    """

    kind: str
    start: int
    end: int
    after: str | None
    before: str | None
    zeros_end: int
    watch_end: int
    seen: int = field(init=False)    # bytes before this offset have been fed
    first_nonzero: int | None = None
    nonzero_byte: int = 0            # the byte at first_nonzero
    head: bytearray = field(default_factory=bytearray)

    def __post_init__(self) -> None:
        self.seen = self.start

    @property
    def finding_start(self) -> int | None:
        """Where the finding begins, once the bytes fed so far tell."""
        if self.kind != TRAILING:
            return self.start
        if self.first_nonzero is not None and self.first_nonzero < self.zeros_end:
            return self.first_nonzero
        return self.zeros_end if self.seen >= self.zeros_end else None

    def feed(self, offset: int, data: bytes) -> None:
        """Bytes at ``offset``, which must be where the last ones ended."""
        if self.first_nonzero is None:
            stripped = data.lstrip(b"\0")
            if stripped:
                self.first_nonzero, self.nonzero_byte = offset + len(data) - len(stripped), stripped[0]
        self.seen = offset + len(data)
        begin = self.finding_start
        if begin is not None and len(self.head) < HEAD_BYTES:
            lo = max(begin + len(self.head), offset)
            self.head += data[lo - offset:min(begin + HEAD_BYTES, self.seen) - offset]

    def finding(self, path: str) -> StructureFinding | None:
        begin = self.finding_start
        if begin is None or self.seen < self.watch_end:
            raise ValueError(f"bytes [{self.seen}, {self.watch_end}) of {path} were never fed")
        length = self.end - begin
        if not length or (self.kind == PADDING and self.first_nonzero is None):
            return None
        head = bytes(self.head)
        content = _content(head, self.first_nonzero, length)
        if self.kind == PADDING:
            expected, actual = "zeros", f"0x{self.nonzero_byte:02x} at offset {self.first_nonzero}"
        elif self.kind == GAP:
            expected = f"the next tensor at offset {self.start}"
            actual = f"it at offset {self.end}, {length} bytes later {content}"
        else:
            expected, actual = "the end of the file", f"{length} more byte{'' if length == 1 else 's'} {content}"
        return StructureFinding(kind=self.kind, path=path, offset=begin, length=length, after=self.after,
                                before=self.before, first_nonzero=self.first_nonzero, head=head.hex(),
                                expected=expected, actual=actual)


def _content(head: bytes, first_nonzero: int | None, length: int) -> str:
    """What a gap or trailing data holds: its first bytes, and where its first non-zero byte is."""
    shown = f"({head.hex()}{'...' if length > len(head) else ''})"
    if first_nonzero is not None:
        return f"{shown}, first non-zero at offset {first_nonzero}"
    if length <= PROBE_BYTES:
        return f"{shown}, all zeros"
    return f"{shown}, zeros in the first {PROBE_BYTES} bytes read"


def _spans(f: GGUFFile) -> list[_Span]:
    """Every region of ``f`` outside the header and the tensors, in file order.

    Tensor offsets are aligned and never overlap (the parser refuses both), so each tensor starts at or
    after the aligned end of what precedes it: the padding up to there, then any gap.
    """
    spans: list[_Span] = []
    end, after = f.header_end, None
    for t in sorted(f.tensors, key=lambda t: t.offset):
        aligned = _align(end, f.alignment)
        if aligned > end:
            spans.append(_Span(PADDING, end, aligned, after, t.name, end, aligned))
        if t.offset > aligned:
            spans.append(_Span(GAP, aligned, t.offset, after, t.name, aligned, min(t.offset, aligned + PROBE_BYTES)))
        end, after = t.end, t.name
    if f.size > end:
        zeros_end = min(_align(end, f.alignment), f.size)
        spans.append(_Span(TRAILING, end, f.size, after, None, zeros_end, min(f.size, zeros_end + PROBE_BYTES)))
    return spans


@dataclass(frozen=True, kw_only=True)
class Region:
    """A region of a file outside the header and the tensors: ``kind`` (padding, gap, trailing), its bytes
    ``[start, end)`` and the tensors on either side (``after`` None: the header; ``before`` None: the end)."""

    kind: str
    start: int
    end: int
    after: str | None
    before: str | None


def regions(f: GGUFFile) -> tuple[Region, ...]:
    """Every region of ``f`` no tensor owns, in file order, whatever its bytes (``trailing``: all of them
    after the last tensor, its zero padding included); :func:`check_structure` says which are findings."""
    return tuple(Region(kind=s.kind, start=s.start, end=s.end, after=s.after, before=s.before) for s in _spans(f))


class StructureConsumer:
    """Checks the structure of one file from its bytes, fed in order (``update(offset, data)``).

    A chunk consumer for :func:`ggaudit.io.fan_out.read_through`; chunks may be cut anywhere, and
    bytes no check needs are ignored. :meth:`findings` once every needed byte was fed.
    """

    def __init__(self, f: GGUFFile) -> None:
        self.path = f.path
        self.spans = _spans(f)
        self._starts = [s.start for s in self.spans]

    def wanted(self) -> Iterator[tuple[int, int]]:
        """The byte ranges the checks read."""
        for s in self.spans:
            if s.watch_end > s.start:
                yield s.start, s.watch_end

    @property
    def complete(self) -> bool:
        return all(s.seen >= s.watch_end for s in self.spans)

    def update(self, offset: int, data: memoryview) -> None:
        end = offset + len(data)
        i = max(0, bisect.bisect_right(self._starts, offset) - 1)
        while i < len(self.spans) and self.spans[i].start < end:
            s = self.spans[i]
            lo, hi = max(offset, s.seen), min(end, s.watch_end)
            if lo < hi:
                if lo != s.seen:
                    raise ReadError(self.path, "chunks skipped bytes the structure check needs", offset=s.seen)
                s.feed(lo, bytes(data[lo - offset:hi - offset]))
            i += 1

    def findings(self) -> tuple[StructureFinding, ...]:
        return tuple(found for s in self.spans if (found := s.finding(self.path)) is not None)


def check_structure(f: GGUFFile) -> tuple[StructureFinding, ...]:
    """Padding that is not zeros, gaps between tensors, and data after the last tensor, in file order.

    Reads only the padding and the first bytes of any gap or trailing data, at most ``_CHUNK`` at a time.
    ReadError if the file was replaced or resized since it was opened, or cannot be read.
    """
    consumer = StructureConsumer(f)
    fd, st = opening.open_readonly(f.path)
    try:
        if not f.identity.same_file(st) or st.st_size != f.size:
            raise ReadError(f.path, f"file changed since it was opened (size {f.size} -> {st.st_size})")
        for start, end in consumer.wanted():
            for pos in range(start, end, _CHUNK):
                consumer.update(pos, memoryview(_read(fd, f.path, pos, min(_CHUNK, end - pos))))
    finally:
        os.close(fd)
    return consumer.findings()


def _read(fd: int, path: str, offset: int, length: int) -> bytes:
    try:
        data = positioned.pread(fd, length, offset)
    except OSError as err:
        raise ReadError.for_os_error(path, f"read failed: {err.strerror or err}", err, offset=offset) from None
    if len(data) < length:
        raise ReadError(path, "file shrank while reading it", offset=offset + len(data))
    return data
