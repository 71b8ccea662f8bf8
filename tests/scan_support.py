"""Helpers for the scan and block-table tests: finite random tensors of every GGML type, and poking
chosen bits into a chosen float field of a chosen block. Holds no tests itself."""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as T

from ggaudit.format.blocks import LAYOUTS, BlockLayout, Encoding, FloatField

#: Bit patterns of each non-finite kind, per encoding (kinds an encoding cannot hold are absent).
NONFINITE_BITS: dict[Encoding, dict[str, int]] = {
    Encoding.F16: {"nan": 0x7E00, "+inf": 0x7C00, "-inf": 0xFC00},
    Encoding.IQ1M_F16: {"nan": 0x7E01, "+inf": 0x7C00, "-inf": 0xFC00},
    Encoding.BF16: {"nan": 0x7FC0, "+inf": 0x7F80, "-inf": 0xFF80},
    Encoding.F32: {"nan": 0x7FC00000, "+inf": 0x7F800000, "-inf": 0xFF800000},
    Encoding.F64: {"nan": 0x7FF8000000000000, "+inf": 0x7FF0000000000000, "-inf": 0xFFF0000000000000},
    Encoding.E8M0: {"nan": 0xFF},
    Encoding.E4M3: {"nan": 0x7F},
    Encoding.UE4M3: {},
}

FLOAT_TYPES = [t for t, lay in LAYOUTS.items() if lay.is_float_elements]
QUANT_TYPES = [t for t, lay in LAYOUTS.items() if not lay.is_float_elements and not lay.is_integer]
INTEGER_TYPES = [t for t, lay in LAYOUTS.items() if lay.is_integer]


def n_units(layout: BlockLayout, shape: tuple[int, ...]) -> int:
    rows = 1
    for ne in shape[1:]:
        rows *= ne
    return shape[0] // layout.block_size * rows


def finite_bits(encoding: Encoding, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` raw values of ``encoding``: small finite scales (normal and some subnormal for f16)."""
    if encoding in (Encoding.F16, Encoding.IQ1M_F16):
        values = rng.uniform(1e-4, 2e-2, n).astype(np.float16).view(np.uint16).copy()
        values[::5] = rng.integers(1, 0x400, len(values[::5]))      # subnormals are normal data
        return values.astype(np.uint64)
    if encoding is Encoding.BF16:
        return (rng.uniform(1e-3, 1.0, n).astype(np.float32).view(np.uint32) >> 16).astype(np.uint64)
    if encoding is Encoding.F32:
        return rng.uniform(1e-3, 1.0, n).astype(np.float32).view(np.uint32).astype(np.uint64)
    if encoding is Encoding.F64:
        return rng.uniform(1e-3, 1.0, n).view(np.uint64)
    if encoding is Encoding.E8M0:
        return rng.integers(115, 130, n).astype(np.uint64)
    if encoding is Encoding.UE4M3:
        return rng.integers(0, 256, n).astype(np.uint64)
    if encoding is Encoding.E4M3:
        values = rng.integers(0, 0x7F, n)
        return (values | (rng.integers(0, 2, n) << 7)).astype(np.uint64)
    raise AssertionError(encoding)


def poke(buf: bytearray, layout: BlockLayout, unit: int, f: FloatField, bits: int) -> None:
    """Store ``bits`` in field ``f`` of block (or element) ``unit`` of a tensor held in ``buf``."""
    at = unit * layout.block_bytes + f.offset
    if f.encoding is Encoding.IQ1M_F16:
        # The f16 lives in the top nibble of four little-endian u16 words; keep their low 12 bits.
        for i in range(4):
            word = int.from_bytes(buf[at + 2 * i:at + 2 * i + 2], "little")
            word = (word & 0x0FFF) | (((bits >> (4 * i)) & 0xF) << 12)
            buf[at + 2 * i:at + 2 * i + 2] = word.to_bytes(2, "little")
        return
    buf[at:at + f.size] = int(bits).to_bytes(f.size, "little")


def finite_tensor(ggml_type: T, shape: tuple[int, ...], seed: int = 0, layout: BlockLayout | None = None) -> bytearray:
    """Random tensor data of ``ggml_type`` whose every float field (or element) is finite."""
    layout = layout or LAYOUTS[ggml_type]
    rng = np.random.default_rng(seed)
    units = n_units(layout, shape)
    buf = bytearray(rng.integers(0, 256, units * layout.block_bytes, dtype=np.uint8).tobytes())
    for f in layout.fields:
        for unit, bits in enumerate(finite_bits(f.encoding, rng, units)):
            poke(buf, layout, unit, f, int(bits))
    return buf
