"""The one table of GGML block facts: block size, block bytes, and where every float field sits.

The GGML type ids, the GGUF value type ids and each type's block size and byte count are written out here
with gguf-py's names (``GGMLQuantizationType``, ``GGUFValueType``, ``GGML_QUANT_SIZES``), so that reading
a header does not import gguf (and with it numpy and yaml); tests/test_startup_cost.py checks they equal
gguf's. This module adds what gguf does not say: the byte position and encoding of each float field
inside a block (ggml's struct order), and how large a value each can decode to (its ``factor``). A block
of a quantized type decodes to ``scale x small integer (+ min)``, so it decodes non-finite exactly when
one of these fields is non-finite, or when the product passes FLT_MAX: the factors bound that product, so
only the rare blocks whose fields pass a type's overflow floor need decoding. Reading only the fields is
what makes the fast scan fast.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from types import MappingProxyType
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # numpy is imported by the decoders below when they run, not by reading a header
    import numpy as np


class GGMLQuantizationType(enum.IntEnum):
    """ggml's tensor type ids (``enum ggml_type``), as gguf-py names them."""

    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39
    NVFP4 = 40
    Q1_0 = 41


class GGUFValueType(enum.IntEnum):
    """The type ids of GGUF metadata values (``enum gguf_type``), as gguf-py names them."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


T = GGMLQuantizationType

#: Elements per block and bytes per block of each type (gguf-py's ``GGML_QUANT_SIZES``).
GGML_QUANT_SIZES: Mapping[T, tuple[int, int]] = MappingProxyType({
    T.F32: (1, 4), T.F16: (1, 2), T.Q4_0: (32, 18), T.Q4_1: (32, 20), T.Q5_0: (32, 22), T.Q5_1: (32, 24),
    T.Q8_0: (32, 34), T.Q8_1: (32, 40), T.Q2_K: (256, 84), T.Q3_K: (256, 110), T.Q4_K: (256, 144),
    T.Q5_K: (256, 176), T.Q6_K: (256, 210), T.Q8_K: (256, 292), T.IQ2_XXS: (256, 66), T.IQ2_XS: (256, 74),
    T.IQ3_XXS: (256, 98), T.IQ1_S: (256, 50), T.IQ4_NL: (32, 18), T.IQ3_S: (256, 110), T.IQ2_S: (256, 82),
    T.IQ4_XS: (256, 136), T.I8: (1, 1), T.I16: (1, 2), T.I32: (1, 4), T.I64: (1, 8), T.F64: (1, 8),
    T.IQ1_M: (256, 56), T.BF16: (1, 2), T.TQ1_0: (256, 54), T.TQ2_0: (256, 66), T.MXFP4: (32, 17),
    T.NVFP4: (64, 36), T.Q1_0: (128, 18),
})


class Encoding(enum.Enum):
    """How the bytes of one float field are read."""

    F16 = "f16"
    BF16 = "bf16"
    F32 = "f32"
    F64 = "f64"
    E8M0 = "e8m0"          # MXFP4 shared exponent: 2^(e-127); 0xFF is NaN (OCP MX spec)
    UE4M3 = "ue4m3"        # NVFP4 sub-block scale: unsigned E4M3, never non-finite as ggml decodes it
    IQ1M_F16 = "iq1m_f16"  # IQ1_M: an f16 assembled from the top 4 bits of four u16 scale words
    E4M3 = "e4m3"          # FP8 E4M3 elements stored in an I8 tensor (caller says so); 0x7F/0xFF NaN


#: Bytes one field of each encoding occupies in a block.
ENCODING_SIZE: Mapping[Encoding, int] = MappingProxyType({
    Encoding.F16: 2, Encoding.BF16: 2, Encoding.F32: 4, Encoding.F64: 8, Encoding.E8M0: 1,
    Encoding.UE4M3: 1, Encoding.IQ1M_F16: 8, Encoding.E4M3: 1,
})


#: The largest finite float32. ggml dequantizes every block type into float32, so a decoded value whose
#: magnitude passes it (rounded) is +-Inf, however finite the block's fields are.
FLT_MAX = 3.4028234663852886e38

#: The largest finite |value| of each encoding (E8M0: 0xFE = 2^127, 0xFF being NaN; UE4M3: 0xFF, whose
#: bit 7 is ignored, = 480, as ggml and gguf decode it).
ENCODING_MAX: Mapping[Encoding, float] = MappingProxyType({
    Encoding.F16: 65504.0, Encoding.IQ1M_F16: 65504.0, Encoding.BF16: 3.3895313892515355e38,
    Encoding.F32: FLT_MAX, Encoding.F64: 1.7976931348623157e308, Encoding.E8M0: 2.0 ** 127,
    Encoding.UE4M3: 480.0, Encoding.E4M3: 448.0,
})

#: ggml decodes in float32 steps (``d * sub-scale``, then ``* quant``), each rounding by up to 2^-24:
#: a block is treated as able to overflow from a bound this much below FLT_MAX, so rounding cannot
#: carry a value past FLT_MAX unseen.
ROUNDING_MARGIN = 1 + 2.0 ** -20


@dataclass(frozen=True)
class FloatField:
    """One float field inside a block: its name, byte offset, encoding and the columns it scales.

    ``factor`` bounds what the field contributes to a decoded value: at most ``factor x |field|`` (the
    largest quant or grid value times the largest sub-scale it is multiplied by, as ggml decodes the
    type); 0 for a field no decoded value is multiplied by. A float element is its own value: factor 1.
    """

    name: str
    offset: int
    encoding: Encoding
    first_col: int
    width: int
    factor: float = 1.0

    @property
    def size(self) -> int:
        return ENCODING_SIZE[self.encoding]


@dataclass(frozen=True)
class BlockLayout:
    """Facts about one GGML type's block."""

    ggml_type: T
    block_size: int
    block_bytes: int
    fields: tuple[FloatField, ...]
    is_float_elements: bool = False
    is_integer: bool = False

    @property
    def name(self) -> str:
        return self.ggml_type.name

    def sharing(self, f: FloatField) -> tuple[FloatField, ...]:
        """The fields that scale a column ``f`` scales too (``f`` among them): Q4_K's ``d`` and ``dmin``."""
        return tuple(g for g in self.fields
                     if g.first_col < f.first_col + f.width and f.first_col < g.first_col + g.width)

    def magnitude_bound(self, values: Mapping[str, float]) -> float:
        """The largest |decoded value| a block whose fields hold ``values`` (by name) can have: per column,
        the sum of ``factor x |field|`` over the fields that scale it (``d x sub-scale x quant - dmin x
        min``). A float element is its own value."""
        return max((sum(g.factor * abs(values[g.name]) for g in self.sharing(f)) for f in self.fields),
                   default=0.0)

    def overflow_floor(self, f: FloatField) -> float:
        """The smallest |f| from which the block may decode past FLT_MAX: below it every decoded value is
        finite whatever the other fields and quants hold (when the sum of n terms passes FLT_MAX, one of
        them passes FLT_MAX / n). Inf for float elements (nothing multiplies them) and factor-0 fields."""
        if self.is_float_elements or f.factor == 0:
            return math.inf
        terms = sum(1 for g in self.sharing(f) if g.factor)
        return FLT_MAX / (f.factor * terms * ROUNDING_MARGIN)

    @property
    def can_overflow(self) -> bool:
        """Whether some block of finite fields can decode to +-Inf: a field's largest finite value
        reaches its overflow floor (Q8_K and Q8_1's f32 ``d``, MXFP4's E8M0 ``e``); no f16 scale can."""
        return any(ENCODING_MAX[f.encoding] >= self.overflow_floor(f) for f in self.fields)


def _quant(t: T, *fields: tuple[str, int, Encoding, float]) -> BlockLayout:
    block_size, block_bytes = GGML_QUANT_SIZES[t]
    return BlockLayout(t, block_size, block_bytes,
                       tuple(FloatField(n, o, e, 0, block_size, factor) for n, o, e, factor in fields))


def _elements(t: T, encoding: Encoding) -> BlockLayout:
    _, nbytes = GGML_QUANT_SIZES[t]
    return BlockLayout(t, 1, nbytes, (FloatField("value", 0, encoding, 0, 1),), is_float_elements=True)


def _integer(t: T) -> BlockLayout:
    _, nbytes = GGML_QUANT_SIZES[t]
    return BlockLayout(t, 1, nbytes, (), is_integer=True)


def _nvfp4() -> BlockLayout:
    # Four unsigned-E4M3 scales, one per 16-element sub-block, then 32 bytes of packed E2M1 values
    # (|value| <= 6 per unit of scale; ggml and gguf store them doubled and halve the scale).
    block_size, block_bytes = GGML_QUANT_SIZES[T.NVFP4]
    sub = block_size // 4
    fields = tuple(FloatField(f"d[{i}]", i, Encoding.UE4M3, i * sub, sub, 6.0) for i in range(4))
    return BlockLayout(T.NVFP4, block_size, block_bytes, fields)


_H, _F, _E8 = Encoding.F16, Encoding.F32, Encoding.E8M0

# The last number of each field is its factor: the largest |decoded value| per unit of the field, as
# ggml's dequantize_row_<type> (ggml/src/ggml-quants.c) and gguf.quants compute it; tests/test_blocks.py
# proves each against the decoders. "sub x q" is the largest sub-scale times the largest |quant|.
_TABLE: tuple[BlockLayout, ...] = (
    _elements(T.F32, Encoding.F32),
    _elements(T.F16, Encoding.F16),
    _elements(T.BF16, Encoding.BF16),
    _elements(T.F64, Encoding.F64),
    _integer(T.I8), _integer(T.I16), _integer(T.I32), _integer(T.I64),
    _quant(T.Q4_0, ("d", 0, _H, 8)),                            # d x (q - 8), q 0..15
    _quant(T.Q4_1, ("d", 0, _H, 15), ("m", 2, _H, 1)),          # d x q + m
    _quant(T.Q5_0, ("d", 0, _H, 16)),                           # d x (q - 16), q 0..31
    _quant(T.Q5_1, ("d", 0, _H, 31), ("m", 2, _H, 1)),
    _quant(T.Q8_0, ("d", 0, _H, 128)),                          # d x q, q int8
    # gguf-py sizes Q8_1 at 40 bytes: f32 d and f32 s (d * sum(qs)). It is an intermediate type
    # ggml never writes to files; we follow gguf's size so a file that holds one is still readable.
    # Its values are d x qs (int8); s only feeds dot products, so no decoded value is a multiple of it.
    _quant(T.Q8_1, ("d", 0, _F, 128), ("s", 4, _F, 0)),
    _quant(T.Q2_K, ("d", 80, _H, 15 * 3), ("dmin", 82, _H, 15)),       # d x sub4 x q2 - dmin x min4
    _quant(T.Q3_K, ("d", 108, _H, 32 * 4)),                              # d x (sub6 - 32) x (q3 - 4)
    _quant(T.Q4_K, ("d", 0, _H, 63 * 15), ("dmin", 2, _H, 63)),         # d x sub6 x q4 - dmin x min6
    _quant(T.Q5_K, ("d", 0, _H, 63 * 31), ("dmin", 2, _H, 63)),         # d x sub6 x q5 - dmin x min6
    _quant(T.Q6_K, ("d", 208, _H, 128 * 32)),                            # d x sub int8 x (q6 - 32)
    _quant(T.Q8_K, ("d", 0, _F, 128)),                                   # dequantize_row_q8_K: d x qs int8
    _quant(T.IQ2_XXS, ("d", 0, _H, 0.25 * 15.5 * 43)),     # d x (0.5 + sub4) / 4 x grid (8, 25, 43)
    _quant(T.IQ2_XS, ("d", 0, _H, 0.25 * 15.5 * 43)),
    _quant(T.IQ3_XXS, ("d", 0, _H, 0.5 * 15.5 * 62)),      # d x (0.5 + sub4) / 2 x grid (4 .. 62)
    _quant(T.IQ1_S, ("d", 0, _H, 15 * 1.125)),             # d x (2 sub3 + 1) x (grid -1..1 + delta 1/8)
    _quant(T.IQ4_NL, ("d", 0, _H, 127)),                   # d x kvalues_iq4nl (-127 .. 113)
    _quant(T.IQ3_S, ("d", 0, _H, 31 * 15)),                # d x (2 sub4 + 1) x grid (1 .. 15)
    _quant(T.IQ2_S, ("d", 0, _H, 0.25 * 15.5 * 43)),
    _quant(T.IQ4_XS, ("d", 0, _H, 32 * 127)),              # d x (sub6 - 32) x kvalues_iq4nl
    _quant(T.IQ1_M, ("d", 48, Encoding.IQ1M_F16, 15 * 1.125)),
    _quant(T.TQ1_0, ("d", 52, _H, 1)),                     # d x (q - 1), q 0..2
    _quant(T.TQ2_0, ("d", 64, _H, 2)),                     # d x (q - 1), q 0..3
    _quant(T.MXFP4, ("e", 0, _E8, 6)),                     # 2^(e-127) x E2M1 (|value| <= 6)
    _nvfp4(),
    # Q1_0: f16 d then 16 bytes of sign bits; every element is +d or -d.
    _quant(T.Q1_0, ("d", 0, _H, 1)),
)

LAYOUTS: Mapping[T, BlockLayout] = MappingProxyType({b.ggml_type: b for b in _TABLE})

#: The layout of an I8 tensor the caller says holds FP8 E4M3 bytes.
FP8_E4M3_ELEMENTS = BlockLayout(T.I8, 1, 1, (FloatField("value", 0, Encoding.E4M3, 0, 1),),
                                is_float_elements=True)


def layout_of(ggml_type: T) -> BlockLayout:
    """Return the block layout of *ggml_type*; KeyError for a type ggaudit has no facts for."""
    return LAYOUTS[ggml_type]


def known_type(value: int) -> T | None:
    """The GGML type with numeric id *value*, or None when ggaudit has no block facts for it."""
    try:
        t = T(value)
    except ValueError:
        return None
    return t if t in LAYOUTS else None


# Decoding: every field is turned into float64 for reporting, plus a "non-finite" class per value.
# Each decoder imports numpy itself (a dictionary look-up once loaded) so that the table above costs
# no numpy: `ggaudit --help` and reading a header never load it.

def field_bits(field: FloatField, raw: np.ndarray) -> np.ndarray:
    """The raw bits of each field as unsigned integers; *raw* is (n, field.size) uint8."""
    import numpy as np

    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    if field.encoding is Encoding.IQ1M_F16:
        return iq1m_assemble(raw)
    width = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[field.size]
    words: np.ndarray = raw.view(np.dtype(width).newbyteorder("<")).reshape(-1)
    return words


def iq1m_assemble(raw: np.ndarray) -> np.ndarray:
    """IQ1_M keeps its f16 scale in the top nibble of each of four u16 scale words (low first)."""
    import numpy as np

    words = np.ascontiguousarray(raw, dtype=np.uint8).view("<u2").reshape(-1, 4)
    return ((words[:, 0] >> 12) | ((words[:, 1] >> 12) << 4) | ((words[:, 2] >> 12) << 8)
            | ((words[:, 3] >> 12) << 12)).astype(np.uint16)


def decode_bits(encoding: Encoding, bits: np.ndarray) -> np.ndarray:
    """Decode field bits (as returned by :func:`field_bits`) to float64 values."""
    import numpy as np

    # Widening a signalling NaN raises FE_INVALID, which numpy turns into a RuntimeWarning on stderr;
    # the value is still NaN, which is what the caller wants to see.
    # numpy 1.x cannot reinterpret a 0-d array as a dtype of another width: decode a 1-d view, then
    # give the caller back the shape it passed.
    bits = np.asarray(bits)
    with np.errstate(invalid="ignore"):
        return _decode_bits(encoding, bits.reshape(-1)).reshape(bits.shape)


def _decode_bits(encoding: Encoding, bits: np.ndarray) -> np.ndarray:
    import numpy as np

    if encoding in (Encoding.F16, Encoding.IQ1M_F16):
        return bits.astype(np.uint16).view(np.float16).astype(np.float64)
    if encoding is Encoding.BF16:
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if encoding is Encoding.F32:
        return bits.astype(np.uint32).view(np.float32).astype(np.float64)
    if encoding is Encoding.F64:
        return bits.astype(np.uint64).view(np.float64)
    if encoding is Encoding.E8M0:
        e = bits.astype(np.int64)
        return np.where(e == 0xFF, np.nan, np.ldexp(1.0, (e - 127).astype(np.int32)))
    if encoding is Encoding.UE4M3:
        return _ue4m3(bits.astype(np.int64))
    if encoding is Encoding.E4M3:
        return _e4m3(bits.astype(np.int64))
    raise ValueError(f"no decoder for {encoding}")


def _e4m3_magnitude(b: np.ndarray) -> np.ndarray:
    """|x| of E4M3 bytes (exponent bias 7, subnormals at exponent 0), bit 7 ignored, no NaN."""
    import numpy as np

    exp = (b >> 3) & 0xF
    man = (b & 7).astype(np.float64)
    return np.where(exp == 0, man * 2.0 ** -9, (1 + man / 8) * np.exp2(exp.astype(np.float64) - 7))


def _ue4m3(b: np.ndarray) -> np.ndarray:
    import numpy as np

    # As gguf.quants decodes NVFP4 scales: bit 7 ignored, 0x7F means zero, so no NaN or Inf exists.
    return np.where(b == 0x7F, 0.0, _e4m3_magnitude(b))


def _e4m3(b: np.ndarray) -> np.ndarray:
    import numpy as np

    return np.where((b & 0x7F) == 0x7F, np.nan, np.where(b & 0x80, -1.0, 1.0) * _e4m3_magnitude(b))


def dequantize(blocks: np.ndarray, ggml_type: T) -> np.ndarray:
    """Whole blocks of ``ggml_type`` decoded by gguf.quants (NotImplementedError for a type it cannot
    decode). Only --deep, row replay and the rare huge-scale check decode, so gguf (a tenth of a second
    to import, yaml with it) is imported here, on first use."""
    import gguf
    import gguf.quants

    decoded: np.ndarray = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType(ggml_type))
    return decoded


def dequantize_exact(blocks: np.ndarray, ggml_type: T) -> np.ndarray:
    """Whole blocks decoded as ggml decodes them, in float32: by gguf.quants, or for the types that can
    overflow and that it cannot decode (Q8_K, Q8_1) by ggml's formula, ``d x qs`` in float32
    (ggml/src/ggml-quants.c dequantize_row_q8_K; Q8_1 as quantize_row_q8_1_ref fills it). What decides
    whether a block past its overflow floor really decodes to +-Inf."""
    import numpy as np

    if ggml_type not in (T.Q8_K, T.Q8_1):
        return dequantize(blocks, ggml_type)
    layout = LAYOUTS[ggml_type]
    raw = np.ascontiguousarray(blocks, dtype=np.uint8).reshape(-1, layout.block_bytes)
    d = raw[:, :4].copy().view("<f4").astype(np.float32)
    first = 4 if ggml_type is T.Q8_K else 8         # Q8_K: d, qs, bsums; Q8_1: d, s, qs
    qs = raw[:, first:first + layout.block_size].view(np.int8).astype(np.float32)
    decoded: np.ndarray = (d * qs).reshape(-1)
    return decoded
