"""The row geometry of one embedding table, as every part of the replay needs it.

Its own module, below the others of :mod:`ggaudit.rows`: selecting rows, classifying a mismatch and the
finiteness test all take a :class:`RowTable`, and the replay imports them all (tests/test_imports.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..format.blocks import Encoding, GGMLQuantizationType, decode_bits, dequantize
from ..format.layout import Tensor


@dataclass(frozen=True)
class RowTable:
    """The row geometry of one 2-D (or higher) tensor, as the replay needs it."""

    tensor: Tensor
    file_size: int
    fp8: bool = False  # an I8 table holding FP8 E4M3 bytes

    @property
    def name(self) -> str:
        return self.tensor.name

    @property
    def path(self) -> str:
        return self.tensor.path

    @property
    def row_bytes(self) -> int:
        return self.tensor.row_bytes

    @property
    def n_rows(self) -> int:
        return self.tensor.n_rows

    def row_offset(self, row: int) -> int:
        return self.tensor.offset + row * self.tensor.row_bytes

    def row_at(self, offset: int) -> tuple[int, int]:
        """(row, byte within row) of an absolute file offset inside the table."""
        return divmod(offset - self.tensor.offset, self.tensor.row_bytes)

    def decode(self, data: bytes) -> np.ndarray | None:
        """The row's values as floats (gguf.quants, or FP8 E4M3 when asked), or None if undecodable."""
        raw = np.frombuffer(data, dtype=np.uint8)
        t = self.tensor.ggml_type
        if t == GGMLQuantizationType.I8:
            return decode_bits(Encoding.E4M3, raw) if self.fp8 else raw.view(np.int8).astype(np.float64)
        if t in (GGMLQuantizationType.I16, GGMLQuantizationType.I32, GGMLQuantizationType.I64):
            return raw.view({GGMLQuantizationType.I16: "<i2", GGMLQuantizationType.I32: "<i4"}
                            .get(t, "<i8")).astype(np.float64)
        try:
            # A delivered row is untrusted: Inf x 0 in gguf.quants is a NaN to report, not a RuntimeWarning.
            with np.errstate(all="ignore"):
                return np.asarray(dequantize(raw, t), dtype=np.float64).reshape(-1)
        except (NotImplementedError, ValueError, KeyError):
            return None
