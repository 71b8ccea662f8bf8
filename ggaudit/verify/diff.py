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
from typing import Any

import numpy as np

from .. import io
from .._version import __version__
from ..errors import check_arg, options_from
from ..diagnostic import Diagnostic, Place
from .diff_lines import describe_data_diff, describe_layout_change, describe_metadata_change, describe_only
from .diff_meta import MetadataChange, diff_metadata
from .diff_structure import DIAGNOSTIC_KINDS as _STRUCTURE_KINDS
from .diff_structure import StructureDiff, diff_structures
from ..io import Progress
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


@dataclass(frozen=True, kw_only=True)
class ValueChange:
    """A value of the first differing block, decoded on both sides: ``what`` is ``element`` (a float
    tensor's element), ``field`` (a quantized block's float field, ``name`` d, dmin...: it scales
    ``columns`` columns from ``column``) or ``decoded`` (an element of a quantized block as
    ``gguf.quants`` dequantizes it). ``encoding`` is how the value is stored (``f32``, ``f16``, ``bf16``,
    ...; ``f32`` for a dequantized element): ``a`` and ``b`` are that value exactly, as float."""

    what: str
    name: str
    column: int
    columns: int
    encoding: str
    a: float
    b: float

    def to_json(self) -> dict[str, Any]:
        return {"what": self.what, "name": self.name, "column": self.column, "columns": self.columns,
                "encoding": self.encoding, "a": _json_float(self.a), "b": _json_float(self.b)}


@dataclass(frozen=True, kw_only=True)
class FirstDifference:
    """The first byte at which a tensor's data differs, and the whole block around it on both sides.

    ``changes``: the block's values that differ, decoded: the element (float types); the float fields
    holding a differing byte (quantized types); else the first :data:`MAX_DECODED_CHANGES` dequantized
    elements that differ, of ``decoded_differing``. Empty for integer types and types gguf cannot decode.
    """

    row: int
    block: int              # block index within the row
    column: int             # first column (element index along ne0) the block covers
    columns: int            # how many columns the block covers (1 for F32/F16/BF16/...)
    byte_in_block: int
    offset_a: int           # absolute file offset of the block in A
    offset_b: int
    block_bytes: int
    raw_a: bytes
    raw_b: bytes
    changes: tuple[ValueChange, ...] = ()
    decoded_differing: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"row": self.row, "block": self.block, "column": self.column, "columns": self.columns,
                "byte_in_block": self.byte_in_block, "offset_a": self.offset_a, "offset_b": self.offset_b,
                "block_bytes": self.block_bytes, "raw_a": self.raw_a.hex(), "raw_b": self.raw_b.hex(),
                "changes": [c.to_json() for c in self.changes], "decoded_differing": self.decoded_differing}


@dataclass(frozen=True, kw_only=True)
class TensorDataDiff:
    name: str
    ggml_type: str
    shape: tuple[int, ...]
    path_a: str
    path_b: str
    n_rows: int
    rows_differing: int
    first: FirstDifference

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ggml_type": self.ggml_type, "shape": list(self.shape), "path_a": self.path_a,
                "path_b": self.path_b, "n_rows": self.n_rows, "rows_differing": self.rows_differing,
                "first": self.first.to_json()}


@dataclass(frozen=True, kw_only=True)
class LayoutChange:
    """A tensor present in both whose type or shape changed (its data is then not compared)."""

    name: str
    what: str               # "type" or "shape" or "type+shape"
    type_a: str
    type_b: str
    shape_a: tuple[int, ...]
    shape_b: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "what": self.what, "type_a": self.type_a, "type_b": self.type_b,
                "shape_a": list(self.shape_a), "shape_b": list(self.shape_b)}


@dataclass(frozen=True, kw_only=True)
class DiffStats:
    tensors_compared: int
    bytes_compared: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"tensors_compared": self.tensors_compared, "bytes_compared": self.bytes_compared,
                "seconds": round(self.seconds, 6)}


@dataclass(frozen=True, kw_only=True)
class DiffReport:
    """The result of :func:`diff_models`; ``ok`` when the two models hold the same metadata and tensors,
    and each file the same bytes outside its tensors (``structure``: file by file)."""

    a: str
    b: str
    only_in_a: tuple[str, ...]
    only_in_b: tuple[str, ...]
    layout_changes: tuple[LayoutChange, ...]
    data_diffs: tuple[TensorDataDiff, ...]
    identical: tuple[str, ...]
    stats: DiffStats
    stopped_early: bool = False
    metadata: tuple[MetadataChange, ...] = ()   # keys of the first file (of a split set) that differ
    structure: tuple[StructureDiff, ...] = ()

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

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "tool_version": __version__, "ok": self.ok, "a": self.a, "b": self.b,
                "stopped_early": self.stopped_early, "metadata": [c.to_json() for c in self.metadata],
                "only_in_a": list(self.only_in_a), "only_in_b": list(self.only_in_b),
                "layout_changes": [c.to_json() for c in self.layout_changes],
                "data_diffs": [d.to_json() for d in self.data_diffs], "identical": list(self.identical),
                "structure": [s.to_json() for s in self.structure], "stats": self.stats.to_json()}


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


def diff_paths(path_a: Target, path_b: Target, *, options: DiffOptions | None = None,
               progress: Progress | None = None, **keywords: Any) -> DiffReport:
    """Open both models (a path, any shard of a split set, ``ollama:NAME``, ``hf:ORG/NAME`` or a Model)
    and compare them (``progress``: as :func:`diff_models`). The options are a :class:`DiffOptions`
    (``options=``) or its fields as keywords, not both."""
    opts = options_from(DiffOptions, options, keywords)
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
            fd = self._fds[path] = io.open_fd(path)
        io.pread_exact(fd, path, buf, offset)

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
