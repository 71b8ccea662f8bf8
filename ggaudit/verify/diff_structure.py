"""Compare two GGUF files' structure: the bytes no tensor and no header owns, and the facts that place them.

Each file's regions come from :func:`ggaudit.format.structure.regions` (the walk ``scan`` uses): the
padding after the header and after each tensor, any gap before a tensor, everything after the last one.
A region is matched to the other file's by its logical place (its kind and the tensors either side, so
"padding between tensor X and tensor Y" in both) and compared by content, streamed in bounded chunks:
a 10 GB payload after the last tensor is never held in memory. Zero padding that the alignment asks
for carries nothing but its length, which follows from the layout: it is compared only against a region
that holds something else (:func:`ggaudit.format.structure.check_structure` says which do). The file's
alignment, data-section offset and size are compared as facts.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import zip_longest
from typing import Any, ClassVar

from ..diagnostic import Diagnostic, Place
from ..wording import between
from ..escaping import escape_path
from ..format.layout import GGUFFile
from ..format.structure import (GAP, HEAD_BYTES, PADDING, TRAILING, Region, StructureFinding, check_structure,
                                regions)
from ..json_shape import json_key, json_record, to_json
from .diff_meta import CHUNK_BYTES, ReadFn, Span, first_difference

#: A region's logical place in its file: kind, the tensor before it, the tensor after it.
_Place = tuple[str, str | None, str | None]

CHANGED, ONLY_IN_A, ONLY_IN_B = "changed", "only-in-a", "only-in-b"
#: Bytes as hex: a region's head, none where a file's region ends before the difference.
HEX = "^([0-9a-f]{2})*$"
#: The kind of every diagnostic of a structure difference (ggaudit.kinds id).
DIAGNOSTIC_KINDS = ("diff/structure",)


@json_record
class RegionChange:
    """A region no tensor owns that differs between the two files at the same logical place.

    ``kind``: ``padding``, ``gap`` or ``trailing`` (as ``scan`` names them); ``after``/``before``: the
    tensors on either side (None: the header before, the end of the file after). ``what``: ``changed``
    (in both, other bytes or another length), ``only-in-a`` or ``only-in-b`` (then its offset and length
    are the finding ``scan`` reports in that file). ``offset_*``/``length_*``: the region in each file,
    None where absent. ``byte``: where in the region the first difference is; ``first_*``: its absolute
    offset in each file, None where that file's region ends before it; ``head_*``: the hex of up to 16
    bytes from there.
    """

    JSON_DEF: ClassVar[str] = "region_change"
    JSON_EXTRA: ClassVar[dict[str, Any]] = {
        "description": "A region no tensor owns that differs between the two files at the same place (diff)."}

    kind: str = json_key(values=(PADDING, GAP, TRAILING))
    what: str = json_key(values=(CHANGED, ONLY_IN_A, ONLY_IN_B))
    after: str | None
    before: str | None
    offset_a: int | None = json_key(minimum=0)
    length_a: int | None = json_key(minimum=0)
    offset_b: int | None = json_key(minimum=0)
    length_b: int | None = json_key(minimum=0)
    byte: int = json_key(minimum=0)
    first_a: int | None = json_key(minimum=0)
    first_b: int | None = json_key(minimum=0)
    head_a: str = json_key(pattern=HEX)
    head_b: str = json_key(pattern=HEX)

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


@json_record
class StructureDiff:
    """The structure of a file of A against the file of B in the same place (a split set: shard by
    shard; a shard only one model has is compared with nothing, its side None)."""

    JSON_DEF: ClassVar[str] = "structure_diff"
    JSON_EXTRA: ClassVar[dict[str, Any]] = {
        "description": "A file of A against the file of B in the same place (a split set: shard by shard; a shard "
                       "only one has: the other side null)."}

    #: No file fact and no region differs.
    ok: bool = json_key(default=False, init=False)
    path_a: str | None
    path_b: str | None
    alignment_a: int | None = json_key(minimum=1)
    alignment_b: int | None = json_key(minimum=1)
    data_offset_a: int | None = json_key(minimum=0)
    data_offset_b: int | None = json_key(minimum=0)
    size_a: int | None = json_key(minimum=0)
    size_b: int | None = json_key(minimum=0)
    regions_a: int = json_key(minimum=0)             # regions no tensor owns in each file, all compared
    regions_b: int = json_key(minimum=0)
    changes: tuple[RegionChange, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "ok", not self.differences)

    @property
    def facts(self) -> tuple[tuple[str, int | None, int | None], ...]:
        """The file facts that differ: (name, in A, in B)."""
        return tuple(fact for fact in (("alignment", self.alignment_a, self.alignment_b),
                                       ("data offset", self.data_offset_a, self.data_offset_b),
                                       ("size", self.size_a, self.size_b)) if fact[1] != fact[2])

    @property
    def differences(self) -> int:
        """What the text report counts: a line for the differing facts, and one for each region."""
        return (1 if self.facts else 0) + len(self.changes)

    def diagnostics(self) -> Iterator[Diagnostic]:
        """The differing file facts (or a file only one side has), at the file; then each region that
        differs, at its bytes in B (A's the related place), or in the one file that has them."""
        facts = describe_structure_facts(self)
        if facts:
            yield Diagnostic(kind="diff/structure", message="\n".join(facts),
                             file=str(self.path_b if self.path_b is not None else self.path_a),
                             extras={k: v for k, v in self.to_json().items() if k != "changes"})
        for c in self.changes:
            in_b = c.offset_b is not None
            path, offset, length = (self.path_b, c.offset_b, c.length_b) if in_b else (self.path_a, c.offset_a,
                                                                                        c.length_a)
            related = (Place(what="the same place in a (expected)", file=str(self.path_a), offset=c.offset_a,
                             length=c.length_a),) if c.what == CHANGED else ()
            yield Diagnostic(kind="diff/structure", message="\n".join(describe_region_change(self, c)),
                             file=str(path), offset=offset, length=length, related=related,
                             extras={"path_a": self.path_a, "path_b": self.path_b, **c.to_json()})

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


def diff_structures(files_a: tuple[GGUFFile, ...], files_b: tuple[GGUFFile, ...], read: ReadFn,
                    chunk_bytes: int = CHUNK_BYTES) -> tuple[StructureDiff, ...]:
    """Each file of A against the file of B in the same place (the shards of split sets in order)."""
    return tuple(diff_structure(fa, fb, read, chunk_bytes) for fa, fb in zip_longest(files_a, files_b))


def diff_structure(a: GGUFFile | None, b: GGUFFile | None, read: ReadFn,
                   chunk_bytes: int = CHUNK_BYTES) -> StructureDiff:
    """The regions no tensor owns that differ, in A's file order, then those only B has."""
    places_a, places_b = _places(a), _places(b)
    found = [_only(ONLY_IN_A, in_a) if (in_b := places_b.get(place)) is None
             else _changed(read, in_a, in_b, chunk_bytes) for place, in_a in places_a.items()]
    found += [_only(ONLY_IN_B, in_b) for place, in_b in places_b.items() if place not in places_a]
    return StructureDiff(
        path_a=_fact(a, "path"), path_b=_fact(b, "path"), alignment_a=_fact(a, "alignment"),
        alignment_b=_fact(b, "alignment"), data_offset_a=_fact(a, "data_offset"),
        data_offset_b=_fact(b, "data_offset"), size_a=_fact(a, "size"), size_b=_fact(b, "size"),
        regions_a=len(places_a), regions_b=len(places_b), changes=tuple(c for c in found if c is not None))


def _fact(f: GGUFFile | None, name: str) -> Any:
    return None if f is None else getattr(f, name)


@dataclass(frozen=True)
class _Held:
    """A region of a file, and the finding ``scan`` makes of it (None: it is only the zero padding the
    alignment asks for)."""

    path: str
    region: Region
    finding: StructureFinding | None

    @property
    def span(self) -> Span:
        return self.path, self.region.start, self.region.end - self.region.start


def _places(f: GGUFFile | None) -> dict[_Place, _Held]:
    """Each region of ``f`` by its place (unique in a file: a tensor has one predecessor)."""
    if f is None:
        return {}
    found = {(s.kind, s.after, s.before): s for s in check_structure(f)}
    return {(r.kind, r.after, r.before): _Held(f.path, r, found.get((r.kind, r.after, r.before)))
            for r in regions(f)}


def _only(what: str, held: _Held) -> RegionChange | None:
    """A region one file has and the other has not: a change unless it is only zero padding."""
    r, s = held.region, held.finding
    if s is None:
        return None
    in_a = what == ONLY_IN_A
    return RegionChange(kind=r.kind, what=what, after=r.after, before=r.before, byte=0,
                        offset_a=s.offset if in_a else None, length_a=s.length if in_a else None,
                        first_a=s.offset if in_a else None, head_a=s.head if in_a else "",
                        offset_b=None if in_a else s.offset, length_b=None if in_a else s.length,
                        first_b=None if in_a else s.offset, head_b="" if in_a else s.head)


def _changed(read: ReadFn, in_a: _Held, in_b: _Held, chunk_bytes: int) -> RegionChange | None:
    """A region both files have, compared byte by byte (unless both are only zero padding)."""
    if in_a.finding is None and in_b.finding is None:
        return None
    at = first_difference(read, in_a.span, in_b.span, chunk_bytes)
    if at is None:
        return None
    ra, rb = in_a.region, in_b.region
    return RegionChange(kind=ra.kind, what=CHANGED, after=ra.after, before=ra.before, byte=at,
                        offset_a=ra.start, length_a=in_a.span[2], offset_b=rb.start, length_b=in_b.span[2],
                        first_a=ra.start + at if at < in_a.span[2] else None,
                        first_b=rb.start + at if at < in_b.span[2] else None,
                        head_a=_head(read, in_a.span, at), head_b=_head(read, in_b.span, at))


def _head(read: ReadFn, span: Span, at: int) -> str:
    """Up to ``HEAD_BYTES`` of a region from byte ``at``, as hex ("" past its end)."""
    path, offset, length = span
    return read(path, offset + at, min(HEAD_BYTES, length - at)).hex() if at < length else ""


# --- the lines (the text report's, and the diagnostics' messages) ---------------------------------------

def describe_structure_diff(s: StructureDiff) -> list[list[str]]:
    """The lines of each structure difference of a pair of files: the file facts that differ (alignment,
    data offset, size), then each region no tensor owns that differs."""
    facts = describe_structure_facts(s)
    return ([facts] if facts else []) + [describe_region_change(s, c) for c in s.changes]


def describe_structure_facts(s: StructureDiff) -> list[str]:
    """The facts of a pair of files that differ (none: no lines), or those of a file only one model has."""
    if s.path_a is None or s.path_b is None:
        side, path, facts = ("b", s.path_b, (s.alignment_b, s.data_offset_b, s.size_b)) if s.path_a is None \
            else ("a", s.path_a, (s.alignment_a, s.data_offset_a, s.size_a))
        return [f"ONLY-IN-{side.upper()} structure file {escape_path(str(path))}: alignment {facts[0]}, "
                f"data offset {facts[1]}, size {facts[2]}"]
    if not s.facts:
        return []
    return [f"CHANGED structure file: {', '.join(f'{name} {a} -> {b}' for name, a, b in s.facts)}",
            f"  a: file {escape_path(s.path_a)}", f"  b: file {escape_path(s.path_b)}"]


def describe_region_change(s: StructureDiff, c: RegionChange) -> list[str]:
    """A region that differs: in one file only (its offset, length and first bytes), or in both, with
    each file's region and the first differing byte (its offset in each file and the bytes from there)."""
    where = f"structure {c.kind} {between(c.after, c.before)}"
    if c.what != CHANGED:
        side, path, offset, length, head = ("a", s.path_a, c.offset_a, c.length_a, c.head_a) if c.what == ONLY_IN_A \
            else ("b", s.path_b, c.offset_b, c.length_b, c.head_b)
        return [f"ONLY-IN-{side.upper()} {where}: file {escape_path(str(path))}, offset {offset}, length {length}: "
                f"{_region_bytes(head, length or 0)}"]
    return [f"CHANGED {where}: first difference at byte {c.byte} of the region",
            _region_side("a", s.path_a, c.offset_a, c.length_a, c.first_a, c.head_a, c.byte),
            _region_side("b", s.path_b, c.offset_b, c.length_b, c.first_b, c.head_b, c.byte)]


def _region_side(side: str, path: str | None, offset: int | None, length: int | None, first: int | None,
                 head: str, byte: int) -> str:
    where = f"  {side}: file {escape_path(str(path))}, offset {offset}, length {length}"
    if first is None:
        return f"{where}; it ends at offset {(offset or 0) + (length or 0)}"
    return f"{where}; at offset {first}: {_region_bytes(head, (length or 0) - byte)}"


def _region_bytes(head: str, length: int) -> str:
    """A region's first bytes as hex, ``...`` when it holds more than those shown."""
    return head + ("..." if length > len(head) // 2 else "")
