"""Compare two models: their metadata key by key (see diff_meta), then tensor by tensor: which tensors
exist in one only, which changed type or shape, and for those whose bytes differ, the first differing
byte (tensor, row, block, column, file offsets, the raw block on both sides) and how many rows differ;
then file by file, the bytes no tensor owns (see diff_structure). Both files are streamed in chunks.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..io import opening, positioned
from ..errors import check_arg, option_keywords, options_from
from ..json_shape import json_key, json_record, report_json, to_json
from ..diagnostic import Case, Diagnostic, Failure, Place, Summary
from ..page import Block, Cell, FactTable, Heading, Table
from ..escaping import escape, escape_path
from ..wording import format_value, plural, shape_text, verb
from .diff_wording import describe_metadata_change, describe_only, hex_window
from .diff_meta import MetadataChange, diff_metadata
from .diff_structure import DIAGNOSTIC_KINDS as _STRUCTURE_KINDS
from .diff_structure import StructureDiff, describe_structure_diff, diff_structures
from ..io.fan_out import Progress
from .digests import Tally
from ..format.blocks import BlockLayout, Encoding, decode_bits, dequantize, field_bits, layout_of
from ..format.layout import Model, Tensor
from ..stores.locate import Target, open_model

log = logging.getLogger(__name__)

#: The ``schema`` of :meth:`DiffReport.to_json`.
SCHEMA = "ggaudit/diff-report/1"

CHUNK_BYTES = 4 << 20
#: Every kind of diagnostic a diff report yields (ggaudit.kinds ids).
DIAGNOSTIC_KINDS = ("diff/metadata", "diff/only-in-a", "diff/only-in-b", "diff/layout", "diff/data",
                    *_STRUCTURE_KINDS)


#: Dequantized elements of the first differing block listed with their values (all are counted).
MAX_DECODED_CHANGES = 4


def _json_float(value: float) -> float | str:
    """A value for JSON, which has no NaN or Inf: those as ``"nan"``, ``"+inf"``, ``"-inf"`` (as metadata)."""
    if value != value:
        return "nan"
    if value in (float("inf"), float("-inf")):
        return "+inf" if value > 0 else "-inf"
    return value


#: What :func:`_json_float` gives, in the schema.
_JSON_FLOAT = {"anyOf": [{"type": "number"}, {"enum": ["nan", "+inf", "-inf"]}]}
#: Bytes as hex.
_HEX = {"type": "string", "pattern": "^[0-9a-f]+$"}


@json_record
class ValueChange:
    """A value of the first differing block, decoded on both sides: ``what`` is ``element`` (a float
    tensor's element), ``field`` (a quantized block's float field, ``name`` d, dmin...: it scales
    ``columns`` columns from ``column``) or ``decoded`` (an element of a quantized block as
    ``gguf.quants`` dequantizes it). ``encoding`` is how the value is stored (``f32``, ``f16``, ``bf16``,
    ...; ``f32`` for a dequantized element): ``a`` and ``b`` are that value exactly, as float."""

    JSON_DEF: ClassVar[str] = "value_change"
    JSON_EXTRA: ClassVar[dict[str, Any]] = {"description": "A value of the first differing block decoded on both "
                                                           "sides (a non-finite value as \"nan\", \"+inf\" or "
                                                           "\"-inf\")."}

    what: str = json_key(values=("element", "field", "decoded"))
    name: str
    column: int = json_key(minimum=0)
    columns: int = json_key(minimum=1)
    encoding: str
    a: float = json_key(convert=_json_float, schema=_JSON_FLOAT)
    b: float = json_key(convert=_json_float, schema=_JSON_FLOAT)

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


@json_record
class FirstDifference:
    """The first byte at which a tensor's data differs, and the whole block around it on both sides.

    ``changes``: the block's values that differ, decoded: the element (float types); the float fields
    holding a differing byte (quantized types); else the first :data:`MAX_DECODED_CHANGES` dequantized
    elements that differ, of ``decoded_differing``. Empty for integer types and types gguf cannot decode.
    """

    row: int = json_key(minimum=0)
    block: int = json_key(minimum=0)            # block index within the row
    column: int = json_key(minimum=0)           # first column (element index along ne0) the block covers
    columns: int = json_key(minimum=1)          # how many columns the block covers (1 for F32/F16/BF16/...)
    byte_in_block: int = json_key(minimum=0)
    offset_a: int = json_key(minimum=0)         # absolute file offset of the block in A
    offset_b: int = json_key(minimum=0)
    block_bytes: int = json_key(minimum=1)
    raw_a: bytes = json_key(convert=bytes.hex, schema=_HEX)
    raw_b: bytes = json_key(convert=bytes.hex, schema=_HEX)
    changes: tuple[ValueChange, ...] = ()
    decoded_differing: int = json_key(default=0, minimum=0)

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


@json_record
class TensorDataDiff:
    JSON_DEF: ClassVar[str] = "data_diff"

    name: str
    ggml_type: str
    shape: tuple[int, ...] = json_key(minimum=0)
    path_a: str
    path_b: str
    n_rows: int = json_key(minimum=0)
    rows_differing: int = json_key(minimum=0)
    first: FirstDifference

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


@json_record
class LayoutChange:
    """A tensor present in both whose type or shape changed (its data is then not compared)."""

    JSON_DEF: ClassVar[str] = "layout_change"

    name: str
    what: str = json_key(values=("type", "shape", "type+shape"))
    type_a: str
    type_b: str
    shape_a: tuple[int, ...] = json_key(minimum=0)
    shape_b: tuple[int, ...] = json_key(minimum=0)

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


@json_record
class DiffStats:
    tensors_compared: int = json_key(minimum=0)
    bytes_compared: int = json_key(minimum=0)
    seconds: float = json_key(minimum=0, digits=6)

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


@json_record
class DiffReport:
    """The result of :func:`diff_models`; ``ok`` when the two models hold the same metadata and tensors,
    and each file the same bytes outside its tensors (``structure``: file by file)."""

    SCHEMA: ClassVar[str] = SCHEMA
    JSON_DEF: ClassVar[str] = "diff_report"

    a: str
    b: str
    stopped_early: bool = False
    metadata: tuple[MetadataChange, ...] = ()   # keys of the first file (of a split set) that differ
    only_in_a: tuple[str, ...]
    only_in_b: tuple[str, ...]
    layout_changes: tuple[LayoutChange, ...]
    data_diffs: tuple[TensorDataDiff, ...]
    identical: tuple[str, ...]
    structure: tuple[StructureDiff, ...] = ()
    stats: DiffStats

    @property
    def structure_differences(self) -> int:
        return sum(s.differences for s in self.structure)

    @property
    def ok(self) -> bool:
        return not (self.only_in_a or self.only_in_b or self.layout_changes or self.data_diffs or self.metadata
                    or self.structure_differences)

    def diagnostics(self) -> Iterator[Diagnostic]:
        """Metadata keys, tensors only in one model, changed layouts, differing data (at B's block, A's the
        related place), then each file's structure differences."""
        for c in self.metadata:
            yield Diagnostic(kind="diff/metadata", message=describe_metadata_change(c),
                             file=self.a if c.what == "only-in-a" else self.b, field=c.key,
                             extras={"a": self.a, "b": self.b, **c.to_json()})
        for side, names in (("a", self.only_in_a), ("b", self.only_in_b)):
            for name in names:
                yield Diagnostic(kind=f"diff/only-in-{side}", message=describe_only(side, name),
                                 file=self.a if side == "a" else self.b, tensor=name,
                                 extras={"tensor": name, "a": self.a, "b": self.b})
        for lc in self.layout_changes:
            yield Diagnostic(kind="diff/layout", message=describe_layout_change(lc), file=self.b, tensor=lc.name,
                             extras={"tensor": lc.name, "a": self.a, "b": self.b, **lc.to_json()})
        yield from (_data_diagnostic(d) for d in self.data_diffs)
        for s in self.structure:
            yield from s.diagnostics()

    # What every reporter reads (ggaudit.diagnostic.Report): the wording is after the report.
    def summary(self, limit: int | None = None) -> Summary:
        return _summary(self)

    def cases(self) -> Iterator[Case]:
        return _cases(self)

    def page(self, limit: int | None = None) -> list[Block]:
        return _page(self)

    def to_json(self) -> dict[str, Any]:
        return report_json(self)


def _data_diagnostic(d: TensorDataDiff) -> Diagnostic:
    """At the first differing block (element) in B; ``field``: the first float field its bytes change."""
    f = d.first
    a_side = Place(what="the same block in a (expected)", file=d.path_a, offset=f.offset_a, length=f.block_bytes,
                   tensor=d.name)
    return Diagnostic(kind="diff/data", message="\n".join(describe_data_diff(d)), file=d.path_b, offset=f.offset_b,
                      length=f.block_bytes, tensor=d.name, row=f.row, column=f.column,
                      block=None if f.columns == 1 else f.block,
                      field=next((c.name for c in f.changes if c.what == "field"), None),
                      related=(a_side,), extras={"tensor": d.name, **d.to_json()})


# --- a diff in words (DiffReport.summary, the diagnostics' messages) and as test cases ------------------

def describe_layout_change(c: LayoutChange) -> str:
    return (f"CHANGED tensor {escape(c.name)}: {c.what}: {c.type_a} {shape_text(c.shape_a)} -> "
            f"{c.type_b} {shape_text(c.shape_b)}")


def describe_data_diff(d: TensorDataDiff) -> list[str]:
    """fio style: where (files, offsets, length; tensor, row, then the element's column or the block and
    its columns), then A before B: the bytes that differ within the block, marked, and the values they
    change, decoded."""
    f = d.first
    element = f.columns == 1
    where = f"column {f.column}" if element else f"block {f.block}, columns {f.column}..{f.column + f.columns - 1}"
    return [
        f"DIFFER tensor {escape(d.name)} ({d.ggml_type} {shape_text(d.shape)}): {d.rows_differing} of "
        f"{plural(d.n_rows, 'row')} {verb(d.rows_differing)}",
        f"  first at row {f.row}, {where}, byte {f.byte_in_block} of the {f.block_bytes}-byte "
        f"{'element' if element else 'block'}",
        f"  a: file {escape_path(d.path_a)}, offset {f.offset_a}, length {f.block_bytes}",
        f"  b: file {escape_path(d.path_b)}, offset {f.offset_b}, length {f.block_bytes}",
        *hex_window(f.raw_a, f.raw_b),
        *describe_value_changes(f),
    ]


def describe_value_changes(f: FirstDifference) -> list[str]:
    """The values the differing bytes change, A -> B: the element, the scale field, or else the block's
    dequantized elements (the first few, with how many differ)."""
    lines = [_value_change(c) for c in f.changes if c.what != "decoded"]
    decoded = [c for c in f.changes if c.what == "decoded"]
    if decoded:
        lines.append(f"  dequantized: {f.decoded_differing} of {plural(f.columns, 'column')} "
                     f"{verb(f.decoded_differing)}")
        lines.extend(f"    column {c.column}: {_a_to_b(c)}" for c in decoded)
        if f.decoded_differing > len(decoded):
            lines.append(f"    ... and {f.decoded_differing - len(decoded)} more (--json lists the first "
                         f"{len(decoded)} too; dequantize the block for all)")
    return lines


def _value_change(c: ValueChange) -> str:
    if c.what == "element":
        return f"  value at column {c.column} ({c.encoding}): {_a_to_b(c)}"
    cols = f"column {c.column}" if c.columns == 1 else f"columns {c.column}..{c.column + c.columns - 1}"
    return f"  field {escape(c.name)} (scales {cols}, {c.encoding}): {_a_to_b(c)}"


def _a_to_b(c: ValueChange) -> str:
    return f"{format_value(c.a, c.encoding)} -> {format_value(c.b, c.encoding)}"


def _summary(r: DiffReport) -> Summary:
    lines = [f"diff a: {escape_path(r.a)}", f"diff b: {escape_path(r.b)}"]
    # Metadata, tensors in one model only, changed layouts, data, structure: the diagnostics' order.
    lines.extend(line for d in r.diagnostics() for line in d.lines)
    stop = " (stopped at the first difference)" if r.stopped_early else ""
    lines.append(f"summary: {len(r.identical)} identical, {len(r.data_diffs)} "
                 f"{verb(len(r.data_diffs))}, {len(r.layout_changes)} changed type or shape, "
                 f"{len(r.only_in_a)} only in a, {len(r.only_in_b)} only in b, "
                 f"{plural(len(r.metadata), 'metadata key')} {verb(len(r.metadata))}, "
                 f"{plural(r.structure_differences, 'structure difference')}{stop}")
    counted = {"identical": len(r.identical), "differ": len(r.data_diffs), "layout_changes": len(r.layout_changes),
               "only_in_a": len(r.only_in_a), "only_in_b": len(r.only_in_b), "metadata": len(r.metadata),
               "structure": r.structure_differences, "stopped_early": r.stopped_early}
    return Summary(headline=_headline(r), lines=tuple(lines), counted=counted, seconds=r.stats.seconds)


def _headline(r: DiffReport) -> str:
    """``diff a.gguf b.gguf: 1 tensor with other data, 2 metadata keys differ``, or ``...: same``."""
    found = [text for n, text in (
        (len(r.data_diffs), f"{plural(len(r.data_diffs), 'tensor')} with other data"),
        (len(r.layout_changes), f"{len(r.layout_changes)} changed type or shape"),
        (len(r.only_in_a), f"{len(r.only_in_a)} only in a"),
        (len(r.only_in_b), f"{len(r.only_in_b)} only in b"),
        (len(r.metadata), f"{plural(len(r.metadata), 'metadata key')} {verb(len(r.metadata))}"),
        (r.structure_differences, plural(r.structure_differences, "structure difference")),
    ) if n]
    stop = " (stopped at the first difference)" if r.stopped_early else ""
    return f"diff {escape_path(r.a)} {escape_path(r.b)}: {', '.join(found) or 'same metadata and tensors'}{stop}"


def _cases(r: DiffReport) -> Iterator[Case]:
    """The metadata and the structure (a case each), then a case per tensor: failing with its diagnostic,
    or passing (identical)."""
    group = f"{escape_path(r.a)} vs {escape_path(r.b)}"
    by_kind: dict[str, list[Diagnostic]] = {}
    for d in r.diagnostics():
        by_kind.setdefault(d.kind.rpartition("/")[2], []).append(d)
    metadata, structure = by_kind.pop("metadata", []), by_kind.pop("structure", [])
    yield Case(group=group, name="metadata", failure=Failure(
        message=f"{plural(len(metadata), 'metadata key')} differ", kinds="metadata",
        lines=tuple(d.message for d in metadata)) if metadata else None)
    yield Case(group=group, name="structure", failure=Failure(
        message=plural(r.structure_differences, "structure difference"), kinds="structure",
        lines=tuple(line.strip() for d in structure for line in d.lines)) if structure else None)
    for kind in ("only-in-a", "only-in-b", "layout", "data"):
        for d in by_kind.get(kind, []):
            failure = Failure.of([d], [line.strip() for line in d.lines])
            yield Case(group=group, name=escape(str(d.tensor)), failure=failure)
    for name in r.identical:
        yield Case(group=group, name=escape(name))


def _page(r: DiffReport) -> list[Block]:
    facts = (("a", escape_path(r.a)), ("b", escape_path(r.b)), ("identical tensors", str(len(r.identical))),
             ("tensors whose data differ", str(len(r.data_diffs))),
             ("changed type or shape", str(len(r.layout_changes))), ("only in a", str(len(r.only_in_a))),
             ("only in b", str(len(r.only_in_b))), ("metadata keys that differ", str(len(r.metadata))),
             ("structure differences", str(r.structure_differences)))
    out: list[Block] = [Heading(text="Summary"), FactTable(rows=facts)]
    if r.data_diffs:
        out += [Heading(text="Differences"), Table(
            head=("tensor", "type", "shape", "rows differing", "first row", "block", "offset in a", "offset in b"),
            rows=((Cell(text=escape(d.name), css="mono"), Cell(text=d.ggml_type), Cell(text=shape_text(d.shape)),
                   Cell(text=f"{d.rows_differing} of {d.n_rows}", css="num"), Cell.number(d.first.row),
                   Cell.number(d.first.block), Cell.number(d.first.offset_a), Cell.number(d.first.offset_b))
                  for d in r.data_diffs), total=len(r.data_diffs), what="differences")]
    if r.layout_changes:
        out += [Heading(text="Changed type or shape"), Table(
            head=("tensor", "what", "a", "b"),
            rows=((Cell(text=escape(c.name), css="mono"), Cell(text=c.what),
                   Cell(text=f"{c.type_a} {shape_text(c.shape_a)}"), Cell(text=f"{c.type_b} {shape_text(c.shape_b)}"))
                  for c in r.layout_changes),
            total=len(r.layout_changes), what="changes")]
    # The text report's lines: each names both files' offsets and lengths.
    found = [lines for s in r.structure for lines in describe_structure_diff(s)]
    if found:
        out += [Heading(text="Structure"), Table(
            head=("bytes no tensor owns, and the file facts, that differ",),
            rows=((Cell(text="\n".join(lines), css="mono"),) for lines in found), total=len(found),
            what="structure differences")]
    return out


def diff_models(a: Model, b: Model, *, fail_fast: bool = False, chunk_bytes: int = CHUNK_BYTES,
                progress: Progress | None = None) -> DiffReport:
    """Compare two opened models (files or split sets). ``progress(done, total)``: bytes compared (of A's
    tensors, each read on both sides) of the bytes of the tensors to compare, told once per chunk."""
    started = time.perf_counter()
    tensors_b = {t.name: t for t in b.tensors}
    names_a = {t.name for t in a.tensors}
    layout_changes, data_diffs, identical = [], [], []
    compared = bytes_compared = 0
    tally = Tally(progress)
    tally.plan(sum(ta.nbytes for ta in a.tensors
                   if (tb := tensors_b.get(ta.name)) is not None and _layout_change(ta, tb) is None))
    with _Files() as files:
        metadata = diff_metadata(a.files[0], b.files[0], files.read)
        for ta in a.tensors:
            tb = tensors_b.get(ta.name)
            if tb is None:
                continue
            change = _layout_change(ta, tb)
            if change is not None:
                layout_changes.append(change)
                continue
            result = _compare_data(files, ta, tb, chunk_bytes, tally.part())
            compared += 1
            bytes_compared += ta.nbytes
            (data_diffs.append(result) if result else identical.append(ta.name))
            if fail_fast and result:
                break
        structure = diff_structures(a.files, b.files, files.read, chunk_bytes)
    # Differences in bytes that are no longer there would be wrong answers.
    for gguf_file in (*a.files, *b.files):
        gguf_file.check_unchanged("while it was being read")
    stats = DiffStats(tensors_compared=compared, bytes_compared=bytes_compared,
                      seconds=time.perf_counter() - started)
    return DiffReport(a=a.source, b=b.source, only_in_a=tuple(t.name for t in a.tensors if t.name not in tensors_b),
                      only_in_b=tuple(t.name for t in b.tensors if t.name not in names_a),
                      layout_changes=tuple(layout_changes), data_diffs=tuple(data_diffs), identical=tuple(identical),
                      stats=stats,
                      stopped_early=fail_fast and bool(data_diffs), metadata=metadata, structure=structure)


@dataclass(frozen=True, kw_only=True)
class DiffOptions:
    """How :func:`ggaudit.diff` compares (its keyword arguments are these fields). *fail_fast*: stop at the
    first tensor whose data differ."""

    fail_fast: bool = False

    def __post_init__(self) -> None:
        check_arg("fail_fast", self.fail_fast, bool, "True or False")


def diff_paths(path_a: Target, path_b: Target, *, fail_fast: bool = False, options: DiffOptions | None = None,
               progress: Progress | None = None) -> DiffReport:
    """Open both models (a path, any shard of a split set, ``ollama:NAME``, ``hf:ORG/NAME`` or a Model)
    and compare them (``progress``: as :func:`diff_models`). The options are a :class:`DiffOptions`
    (``options=``) or its fields as these keyword parameters, not both.

    Raises:
        UsageError: an option of the wrong type or value, both ``options`` and keywords, a name of no known
            store.
        FormatError: a file that is no well-formed GGUF or split set (naming the offset and the field).
        ReadError: a file that cannot be opened or read, or that changed while it was read. One the OS
            refused is also the standard exception of that error (``FileNotFoundError``, ``PermissionError``,
            else ``OSError``, with ``errno``, ``strerror`` and ``filename``).
        ManifestError: what a store says of a name (an Ollama manifest) is missing, malformed or unsafe.
    """
    opts = options_from(DiffOptions, options, option_keywords(DiffOptions, locals()))
    return diff_models(open_model(path_a), open_model(path_b), fail_fast=opts.fail_fast, progress=progress)


def _layout_change(ta: Tensor, tb: Tensor) -> LayoutChange | None:
    what = [w for w, differs in (("type", ta.ggml_type != tb.ggml_type), ("shape", ta.shape != tb.shape))
            if differs]
    if not what:
        return None
    return LayoutChange(name=ta.name, what="+".join(what), type_a=ta.ggml_type.name, type_b=tb.ggml_type.name,
                        shape_a=tuple(ta.shape), shape_b=tuple(tb.shape))


class _Files:
    """Read-only descriptors by path, opened on first use and closed together."""

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}

    def __enter__(self) -> _Files:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self._fds.values():
            os.close(fd)

    def read_into(self, path: str, buf: memoryview, offset: int) -> None:
        fd = self._fds.get(path)
        if fd is None:
            fd = self._fds[path] = opening.open_fd(path)
        positioned.pread_exact(fd, path, buf, offset)

    def read(self, path: str, offset: int, length: int) -> bytes:
        buf = bytearray(length)
        self.read_into(path, memoryview(buf), offset)
        return bytes(buf)


def _compare_data(files: _Files, ta: Tensor, tb: Tensor, chunk_bytes: int,
                  progress: Progress | None = None) -> TensorDataDiff | None:
    """Stream both tensors; count differing rows and locate the first differing byte."""
    row_bytes = ta.row_bytes
    step = (chunk_bytes // row_bytes) * row_bytes if row_bytes <= chunk_bytes else chunk_bytes
    size = min(step, ta.nbytes)
    buf_a, buf_b = bytearray(size), bytearray(size)
    first_at: int | None = None         # tensor-relative offset of the first differing byte
    rows_differing, last_row = 0, -1
    for start in range(0, ta.nbytes, step):
        n = min(step, ta.nbytes - start)
        view_a, view_b = memoryview(buf_a)[:n], memoryview(buf_b)[:n]
        files.read_into(ta.path, view_a, ta.offset + start)
        files.read_into(tb.path, view_b, tb.offset + start)
        if progress is not None:
            progress(start + n, ta.nbytes)
        # bytearray equality is a memcmp; memoryview equality compares item by item, 15x slower.
        if (buf_a == buf_b) if n == size else (view_a.tobytes() == view_b.tobytes()):
            continue
        diff = np.frombuffer(view_a, np.uint8) != np.frombuffer(view_b, np.uint8)
        if first_at is None:
            first_at = start + int(np.argmax(diff))
        rows = _differing_rows(diff, start, row_bytes)
        rows_differing += len(rows) - (1 if rows[0] == last_row else 0)
        last_row = rows[-1]
    if first_at is None:
        return None
    return TensorDataDiff(name=ta.name, ggml_type=ta.ggml_type.name, shape=tuple(ta.shape), path_a=ta.path,
                          path_b=tb.path, n_rows=ta.n_rows, rows_differing=rows_differing,
                          first=_first_difference(files, ta, tb, first_at))


def _differing_rows(diff: np.ndarray, start: int, row_bytes: int) -> list[int]:
    """Indices of the rows touched by the differing bytes of a chunk starting at ``start``."""
    if start % row_bytes == 0 and len(diff) % row_bytes == 0:
        first_row = start // row_bytes
        touched: list[int] = (first_row + np.flatnonzero(diff.reshape(-1, row_bytes).any(axis=1))).tolist()
        return touched
    rows = []   # rows longer than a chunk: a chunk touches at most two of them
    end = start + len(diff)
    for row in range(start // row_bytes, (end - 1) // row_bytes + 1):
        lo, hi = max(row * row_bytes, start) - start, min((row + 1) * row_bytes, end) - start
        if diff[lo:hi].any():
            rows.append(row)
    return rows


def _first_difference(files: _Files, ta: Tensor, tb: Tensor, at: int) -> FirstDifference:
    row, in_row = divmod(at, ta.row_bytes)
    block, in_block = divmod(in_row, ta.block_bytes)
    block_start = row * ta.row_bytes + block * ta.block_bytes
    raw_a = files.read(ta.path, ta.offset + block_start, ta.block_bytes)
    raw_b = files.read(tb.path, tb.offset + block_start, tb.block_bytes)
    changes, decoded_differing = _value_changes(layout_of(ta.ggml_type), raw_a, raw_b, block * ta.block_size)
    return FirstDifference(
        row=row, block=block, column=block * ta.block_size, columns=ta.block_size, byte_in_block=in_block,
        offset_a=ta.offset + block_start, offset_b=tb.offset + block_start, block_bytes=ta.block_bytes,
        raw_a=raw_a, raw_b=raw_b, changes=changes, decoded_differing=decoded_differing)


def _value_changes(layout: BlockLayout, raw_a: bytes, raw_b: bytes,
                   first_col: int) -> tuple[tuple[ValueChange, ...], int]:
    """``changes`` and ``decoded_differing`` of a FirstDifference: what the differing bytes of one block
    mean. A float element or a float field is decoded from its own bytes; any other byte of a quantized
    block only through the whole block, dequantized."""
    changes = []
    for f in layout.fields:
        # Bits, not bytes: IQ1_M's scale is the top nibble of words whose other bits are not the scale.
        bits_a, bits_b = (field_bits(f, np.frombuffer(raw, np.uint8)[f.offset:][:f.size].reshape(1, -1))
                          for raw in (raw_a, raw_b))
        if bits_a[0] != bits_b[0]:
            changes.append(ValueChange(what="element" if layout.is_float_elements else "field", name=f.name,
                                       column=first_col + f.first_col, columns=f.width,
                                       encoding=_stored_as(f.encoding), a=float(decode_bits(f.encoding, bits_a)[0]),
                                       b=float(decode_bits(f.encoding, bits_b)[0])))
    if changes or layout.is_integer or layout.is_float_elements:
        return tuple(changes), 0
    return _decoded_changes(layout, raw_a, raw_b, first_col)


def _stored_as(encoding: Encoding) -> str:
    # IQ1_M's scale is an f16 whose bits are spread over four words: once assembled, an f16.
    return Encoding.F16.value if encoding is Encoding.IQ1M_F16 else encoding.value


def _decoded_changes(layout: BlockLayout, raw_a: bytes, raw_b: bytes,
                     first_col: int) -> tuple[tuple[ValueChange, ...], int]:
    """The dequantized elements that differ (the first few listed, all counted); none for a type gguf
    cannot decode."""
    try:
        with np.errstate(all="ignore"):     # a non-finite decoded value is a value to show
            a, b = (dequantize(np.frombuffer(raw, np.uint8).reshape(1, -1), layout.ggml_type)
                    .astype(np.float32).reshape(-1) for raw in (raw_a, raw_b))
    except NotImplementedError:
        return (), 0
    # Compared as bits: NaN against NaN is the same value, and -0.0 against 0.0 is not.
    differ = np.flatnonzero(a.view(np.uint32) != b.view(np.uint32))
    changes = tuple(ValueChange(what="decoded", name="decoded", column=first_col + int(c), columns=1,
                                encoding=Encoding.F32.value, a=float(a[c]), b=float(b[c]))
                    for c in differ[:MAX_DECODED_CHANGES])
    return changes, len(differ)
