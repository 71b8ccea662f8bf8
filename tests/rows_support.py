"""Shared helpers for the readers/rows tests (no tests here): whether O_DIRECT really works in a directory
(for the `ddir` fixture in conftest.py), small embedding tables written with ggaudit.format.build, and the reference
bytes of their rows."""

from __future__ import annotations

import errno
import mmap
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T

from ggaudit.format.blocks import Encoding, layout_of
from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.format.layout import Tensor, open_model
from ggaudit.evidence.readers import Buffer, DirectIOUnavailable, Reader, open_reader

PLE = "per_layer_token_embd.weight"


def supports_direct(folder: Path) -> bool:
    """Whether direct reads work in *folder*: O_DIRECT on Linux (tested with the kernel, not ggaudit);
    elsewhere ggaudit's own direct path (Windows FILE_FLAG_NO_BUFFERING, macOS F_NOCACHE)."""
    probe = folder / ".odirect-probe"
    probe.write_bytes(b"\0" * 8192)
    try:
        if sys.platform.startswith("linux"):
            return _o_direct_works(probe)
        try:
            with open_reader(str(probe), "direct") as reader:
                buf = reader.alloc(4096)
                try:
                    return reader.read_into(buf.view, 0) == 4096
                finally:
                    buf.close()
        except DirectIOUnavailable:
            return False
    finally:
        probe.unlink()


def _o_direct_works(probe: Path) -> bool:
    try:
        fd = os.open(probe, os.O_RDONLY | os.O_DIRECT)
    except OSError as err:
        if err.errno == errno.EINVAL:
            return False
        raise
    try:
        buf = mmap.mmap(-1, 4096)
        return os.preadv(fd, [buf], 0) == 4096
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Table:
    path: str
    tensor: Tensor
    data: bytes  # the table's bytes as written

    def row(self, r: int) -> bytes:
        rb = self.tensor.row_bytes
        return self.data[r * rb:(r + 1) * rb]

    def offset(self, r: int) -> int:
        return self.tensor.offset + r * self.tensor.row_bytes


def table_bytes(ggml_type: T, ne0: int, n_rows: int, seed: int = 0) -> bytes:
    """Random blocks whose float fields are finite (0.25), so every row decodes finite."""
    facts = layout_of(ggml_type)
    rng = np.random.default_rng(seed)
    n_blocks = ne0 // facts.block_size * n_rows
    raw = rng.integers(0, 256, size=(n_blocks, facts.block_bytes), dtype=np.uint8)
    if ggml_type == T.I8:
        raw[(raw & 0x7F) == 0x7F] = 0x10  # no FP8 NaN patterns unless a test puts one there
    for f in facts.fields:
        if f.encoding is Encoding.F16:
            raw[:, f.offset:f.offset + 2] = np.frombuffer(np.float16(0.25).tobytes(), np.uint8)
    return raw.tobytes()


def make_table(folder: Path, ggml_type: T = T.IQ4_NL, ne0: int = 160, n_rows: int = 5000, *,
               name: str = PLE, seed: int = 0, filename: str = "model.gguf", lead: int = 0) -> Table:
    """A GGUF holding one table (after an optional *lead*-byte F32 tensor, to shift its offset)."""
    data = table_bytes(ggml_type, ne0, n_rows, seed)
    specs = []
    if lead:
        specs.append(TensorSpec("lead.weight", T.F32, (lead // 4,), b"\0" * lead))
    specs.append(TensorSpec(name, ggml_type, (ne0, n_rows), data))
    path = folder / filename
    write_gguf(path, specs, {"general.architecture": "gemma3n"})
    return Table(str(path), open_model(path).tensor(name), data)


def crossing(table: Table, boundary: int = 4096) -> list[int]:
    """Rows straddling a multiple of *boundary*, found by brute force (independent of ggaudit.rows.replay)."""
    rb = table.tensor.row_bytes
    return [r for r in range(table.tensor.n_rows)
            if table.offset(r) // boundary != (table.offset(r) + rb - 1) // boundary]


class Wrapped(Reader):
    """Delegates everything to a real reader; subclasses break one thing."""

    def __init__(self, inner: Reader) -> None:
        super().__init__(inner.path, inner.size)
        self.inner = inner
        self.mode = inner.mode
        self.alignment = inner.alignment

    def span(self, offset: int, length: int) -> tuple[int, int]:
        return self.inner.span(offset, length)

    def alloc(self, size: int) -> Buffer:
        return self.inner.alloc(size)

    def read_into(self, view: memoryview, offset: int) -> int:
        return self.inner.read_into(view, offset)

    def close(self) -> None:
        self.inner.close()
