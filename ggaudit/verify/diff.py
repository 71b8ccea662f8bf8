"""Compare two models: their metadata key by key (see diff_meta), then tensor by tensor: which tensors
exist in one only, which changed type or shape, and for those whose bytes differ, the first differing
byte (tensor, row, block, column, file offsets, the raw block on both sides) and how many rows differ.
Both files are streamed in chunks.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import io
from .._version import __version__
from .diff_meta import MetadataChange, diff_metadata
from ..format.layout import Model, Tensor
from ..format.locate import Target, open_model

log = logging.getLogger(__name__)

#: The ``schema`` of :meth:`DiffReport.to_json`.
SCHEMA = "ggaudit/diff-report/1"

CHUNK_BYTES = 4 << 20


@dataclass(frozen=True, kw_only=True)
class FirstDifference:
    """The first byte at which a tensor's data differs, and the whole block around it on both sides."""

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

    def to_json(self) -> dict[str, Any]:
        return {"row": self.row, "block": self.block, "column": self.column, "columns": self.columns,
                "byte_in_block": self.byte_in_block, "offset_a": self.offset_a, "offset_b": self.offset_b,
                "block_bytes": self.block_bytes, "raw_a": self.raw_a.hex(), "raw_b": self.raw_b.hex()}


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
    """The result of :func:`diff_models`; ``ok`` when the two models hold the same metadata and tensors."""

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

    @property
    def ok(self) -> bool:
        return not (self.only_in_a or self.only_in_b or self.layout_changes or self.data_diffs or self.metadata)

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "tool_version": __version__, "ok": self.ok, "a": self.a, "b": self.b,
                "stopped_early": self.stopped_early, "metadata": [c.to_json() for c in self.metadata],
                "only_in_a": list(self.only_in_a), "only_in_b": list(self.only_in_b),
                "layout_changes": [c.to_json() for c in self.layout_changes],
                "data_diffs": [d.to_json() for d in self.data_diffs], "identical": list(self.identical),
                "stats": self.stats.to_json()}


def diff_models(a: Model, b: Model, *, fail_fast: bool = False, chunk_bytes: int = CHUNK_BYTES) -> DiffReport:
    """Compare two opened models (files or split sets)."""
    started = time.perf_counter()
    tensors_b = {t.name: t for t in b.tensors}
    names_a = {t.name for t in a.tensors}
    layout_changes, data_diffs, identical = [], [], []
    compared = bytes_compared = 0
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
            result = _compare_data(files, ta, tb, chunk_bytes)
            compared += 1
            bytes_compared += ta.nbytes
            (data_diffs.append(result) if result else identical.append(ta.name))
            if fail_fast and result:
                break
    # Differences in bytes that are no longer there would be wrong answers.
    for gguf_file in (*a.files, *b.files):
        gguf_file.check_unchanged("while it was being read")
    stats = DiffStats(tensors_compared=compared, bytes_compared=bytes_compared,
                      seconds=time.perf_counter() - started)
    return DiffReport(a=a.source, b=b.source, only_in_a=tuple(t.name for t in a.tensors if t.name not in tensors_b),
                      only_in_b=tuple(t.name for t in b.tensors if t.name not in names_a),
                      layout_changes=tuple(layout_changes), data_diffs=tuple(data_diffs), identical=tuple(identical),
                      stats=stats,
                      stopped_early=fail_fast and bool(data_diffs), metadata=metadata)


def diff_paths(path_a: Target, path_b: Target, *, fail_fast: bool = False) -> DiffReport:
    """Open both models (a path, any shard of a split set, ``ollama:NAME``, ``hf:ORG/NAME`` or a Model)
    and compare them."""
    return diff_models(open_model(path_a), open_model(path_b), fail_fast=fail_fast)


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


def _compare_data(files: _Files, ta: Tensor, tb: Tensor, chunk_bytes: int) -> TensorDataDiff | None:
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
    return FirstDifference(
        row=row, block=block, column=block * ta.block_size, columns=ta.block_size, byte_in_block=in_block,
        offset_a=ta.offset + block_start, offset_b=tb.offset + block_start, block_bytes=ta.block_bytes,
        raw_a=files.read(ta.path, ta.offset + block_start, ta.block_bytes),
        raw_b=files.read(tb.path, tb.offset + block_start, tb.block_bytes))
