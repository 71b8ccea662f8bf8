"""Proof of every row of the block table (ggaudit.format.blocks.LAYOUTS) against gguf.quants' decoders.

For each quantized type gguf.quants can decode: poisoning the named float field of the middle block of
three with NaN/Inf bits makes exactly that block (and only the columns the field scales) decode
non-finite, while any value in any other byte of the block leaves every decoded value finite. That is
what lets the fast scan read only these fields.

gguf.quants has no decoder for Q8_1, Q8_K, Q1_0 (and F64): their rows rest on ggml's struct layout
(Q8_K: f32 d first; Q8_1 as gguf-py sizes it: f32 d, f32 s; Q1_0: f16 d then sign bits) and are
checked by the exact-position scan tests only. test_undecodable_types_still_undecodable fails the
day gguf gains a decoder, so the proof can be extended then.

Finite fields can still decode to +-Inf when their product passes FLT_MAX. Each field's ``factor`` (the
largest |decoded value| per unit of field) is proven here to be exactly what gguf.quants decodes at most
(or ggml's formula, for the types gguf cannot decode); from it, every type either cannot overflow (its
largest finite fields decode finite) or has an exact edge: the largest field value whose worst block
decodes finite, and the next one, which decodes to Inf and which the scan reports with cause overflow.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES
import gguf.quants

from ggaudit.format.blocks import (ENCODING_MAX, FLT_MAX, LAYOUTS, ROUNDING_MARGIN, Encoding, FloatField,
                                   GGMLQuantizationType as T, decode_bits, layout_of)
from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.scan.kernel import OVERFLOW_KEY
from ggaudit.scan.run import deep_supported, scan
from ggaudit.scan.workers import reader_pool

from support import run_cli
from scan_support import FLOAT_TYPES, INTEGER_TYPES, NONFINITE_BITS, QUANT_TYPES, finite_tensor, poke
import itertools
import json
import math
from pathlib import Path

DECODABLE = [t for t in QUANT_TYPES if deep_supported(t)]
UNDECODABLE = [t for t in QUANT_TYPES if not deep_supported(t)]
#: Values written into "other" bytes: all-ones, sign bits, exponent-looking patterns, zero.
OTHER_VALUES = (0x00, 0xFF, 0x7F, 0x80, 0x7C, 0xFC, 0x3C)


def _decode(blocks: np.ndarray, ggml_type: T) -> np.ndarray:
    """Decode (variants, 3 blocks) of raw bytes to (variants, 3, block_size) floats."""
    lay = layout_of(ggml_type)
    with np.errstate(all="ignore"):
        out = gguf.quants.dequantize(blocks.reshape(-1), ggml_type)
    return out.reshape(blocks.shape[0], 3, lay.block_size)


def _variants(ggml_type: T, count: int, seed: int = 3) -> np.ndarray:
    lay = layout_of(ggml_type)
    base = np.frombuffer(finite_tensor(ggml_type, (3 * lay.block_size, 1), seed), np.uint8)
    return np.tile(base, (count, 1))


def _field_bytes(ggml_type: T) -> set[int]:
    return {f.offset + i for f in layout_of(ggml_type).fields for i in range(f.size)}


def test_table_covers_every_gguf_type_with_gguf_sizes() -> None:
    assert set(LAYOUTS) == set(GGML_QUANT_SIZES)
    for t, lay in LAYOUTS.items():
        assert (lay.block_size, lay.block_bytes) == GGML_QUANT_SIZES[t]
        spans = sorted((f.offset, f.offset + f.size) for f in lay.fields)
        for (_a0, a1), (b0, _) in itertools.pairwise(spans):
            assert a1 <= b0, f"{t.name}: fields overlap"
        assert all(f.offset >= 0 and f.offset + f.size <= lay.block_bytes for f in lay.fields)
        assert all(f.first_col >= 0 and f.first_col + f.width <= lay.block_size for f in lay.fields)


@pytest.mark.parametrize("ggml_type", INTEGER_TYPES, ids=lambda t: t.name)
def test_integer_types_have_no_float_fields(ggml_type: T) -> None:
    assert layout_of(ggml_type).fields == () and layout_of(ggml_type).is_integer


def test_undecodable_types_still_undecodable() -> None:
    assert {t.name for t in UNDECODABLE} == {"Q8_1", "Q8_K", "Q1_0"}
    for t in [*UNDECODABLE, T.F64]:
        with pytest.raises(NotImplementedError):
            gguf.quants.dequantize(np.zeros(layout_of(t).block_bytes, np.uint8), t)


@pytest.mark.parametrize("ggml_type", DECODABLE, ids=lambda t: t.name)
def test_clean_blocks_decode_finite(ggml_type: T) -> None:
    assert np.isfinite(_decode(_variants(ggml_type, 1), ggml_type)).all()


@pytest.mark.parametrize("ggml_type", [t for t in DECODABLE if t is not T.NVFP4], ids=lambda t: t.name)
def test_poisoned_field_makes_exactly_its_block_nonfinite(ggml_type: T) -> None:
    lay = layout_of(ggml_type)
    cases = [(f, kind, bits) for f in lay.fields for kind, bits in NONFINITE_BITS[f.encoding].items()]
    assert cases, f"{ggml_type.name}: no field can hold a non-finite value"
    blocks = _variants(ggml_type, len(cases))
    for v, (f, _, bits) in enumerate(cases):
        buf = bytearray(blocks[v].tobytes())
        poke(buf, lay, 1, f, bits)
        blocks[v] = np.frombuffer(buf, np.uint8)
    decoded = _decode(blocks, ggml_type)
    for v, (f, kind, _) in enumerate(cases):
        bad = ~np.isfinite(decoded[v])
        assert not bad[0].any() and not bad[2].any(), f"{f.name}={kind} leaked into a neighbour block"
        cols = np.flatnonzero(bad[1])
        assert len(cols), f"{ggml_type.name}.{f.name}={kind} decoded finite"
        assert cols.min() >= f.first_col and cols.max() < f.first_col + f.width


@pytest.mark.parametrize("ggml_type", DECODABLE, ids=lambda t: t.name)
def test_any_other_byte_keeps_the_block_finite(ggml_type: T) -> None:
    lay = layout_of(ggml_type)
    others = [i for i in range(lay.block_bytes) if i not in _field_bytes(ggml_type)]
    cases = [(i, value) for i in others for value in OTHER_VALUES]
    blocks = _variants(ggml_type, len(cases))
    for v, (i, value) in enumerate(cases):
        blocks[v, lay.block_bytes + i] = value
    decoded = _decode(blocks, ggml_type)
    bad = np.argwhere(~np.isfinite(decoded))
    assert not len(bad), f"{ggml_type.name}: byte {cases[bad[0][0]][0]} = {cases[bad[0][0]][1]:#x} went non-finite"


def test_iq1m_low_bits_of_scale_words_are_not_the_scale() -> None:
    # IQ1_M's f16 scale is only the top nibble of each u16 scale word; the low 12 bits are 3-bit
    # sub-block scales and can hold anything without making the block non-finite.
    lay = layout_of(T.IQ1_M)
    (f,) = lay.fields
    blocks = _variants(T.IQ1_M, 4)
    for v, low in enumerate((0x000, 0xFFF, 0x7FF, 0x800)):
        for w in range(4):
            at = lay.block_bytes + f.offset + 2 * w
            word = int.from_bytes(blocks[v, at:at + 2].tobytes(), "little")
            blocks[v, at:at + 2] = np.frombuffer(((word & 0xF000) | low).to_bytes(2, "little"), np.uint8)
    assert np.isfinite(_decode(blocks, T.IQ1_M)).all()


def test_nvfp4_scales_cannot_be_nonfinite_and_scale_their_sub_block() -> None:
    # As ggml and gguf decode UE4M3, bit 7 is ignored and 0x7F means zero: all 256 bytes are finite.
    lay = layout_of(T.NVFP4)
    cases = [(f, value) for f in lay.fields for value in range(256)]
    blocks = _variants(T.NVFP4, len(cases))
    base = _decode(blocks[:1], T.NVFP4)[0]
    for v, (f, value) in enumerate(cases):
        blocks[v, lay.block_bytes + f.offset] = value
    decoded = _decode(blocks, T.NVFP4)
    assert np.isfinite(decoded).all()
    assert np.isfinite(decode_bits(Encoding.UE4M3, np.arange(256))).all()
    for v, (f, _) in enumerate(cases):
        changed = np.flatnonzero(decoded[v, 1] != base[1])
        assert not len(changed) or (changed.min() >= f.first_col and changed.max() < f.first_col + f.width)
        assert (decoded[v, 0] == base[0]).all() and (decoded[v, 2] == base[2]).all()


def _mxfp4_block(e: int, nibble: int) -> np.ndarray:
    """One MXFP4 block with scale byte ``e`` and every 4-bit value equal to ``nibble``."""
    return np.array([e] + [nibble | (nibble << 4)] * 16, np.uint8)


def _mxfp4_decode(block: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return gguf.quants.dequantize(block, T.MXFP4)


def test_mxfp4_e8m0_ff_decodes_as_a_huge_finite_scale_in_gguf() -> None:
    # gguf (like ggml's ggml_e8m0_to_fp32_half) decodes 0xFF as 2^127, not NaN: a block whose values
    # are all 0 or +-0.5 stays finite, larger values overflow to Inf. ggaudit follows the OCP MX spec
    # and reports 0xFF as NaN whatever the values.
    for nibble in (0, 1, 8, 9):
        assert np.isfinite(_mxfp4_decode(_mxfp4_block(0xFF, nibble))).all()
    assert np.isinf(_mxfp4_decode(_mxfp4_block(0xFF, 2))).all()


def test_mxfp4_only_scales_fd_and_fe_can_overflow() -> None:
    # The largest E2M1 magnitude is 6 (nibble 7 / 15): no scale byte below 0xFD overflows with it.
    for e in range(0xFD):
        for nibble in (7, 15):
            assert np.isfinite(_mxfp4_decode(_mxfp4_block(e, nibble))).all(), e
    assert np.isposinf(_mxfp4_decode(_mxfp4_block(0xFD, 6))).all()       # 2^126 x 4
    assert np.isfinite(_mxfp4_decode(_mxfp4_block(0xFD, 5))).all()       # 2^126 x 3
    assert np.isneginf(_mxfp4_decode(_mxfp4_block(0xFE, 12))).all()      # 2^127 x -2
    assert np.isfinite(_mxfp4_decode(_mxfp4_block(0xFE, 3))).all()       # 2^127 x 1.5


@pytest.mark.parametrize("ggml_type", [t for t in FLOAT_TYPES if t is not T.F64], ids=lambda t: t.name)
def test_float_elements_are_their_own_field(ggml_type: T) -> None:
    lay = layout_of(ggml_type)
    (f,) = lay.fields
    for kind, bits in NONFINITE_BITS[f.encoding].items():
        buf = finite_tensor(ggml_type, (16, 1), seed=5)
        poke(buf, lay, 9, f, bits)
        raw = np.frombuffer(bytes(buf), np.uint8)
        decoded = gguf.quants.dequantize(raw, ggml_type).astype(np.float64)
        assert list(np.flatnonzero(~np.isfinite(decoded))) == [9], kind


def test_fp8_e4m3_nan_bytes() -> None:
    values = decode_bits(Encoding.E4M3, np.arange(256))
    assert sorted(np.flatnonzero(np.isnan(values)).tolist()) == [0x7F, 0xFF]
    assert not np.isinf(values).any()


# ----- overflow: finite fields whose product passes FLT_MAX -------------------------------------------

#: The types whose finite fields can decode past FLT_MAX (an f32 d times an int8 quant; an E8M0 scale
#: times an E2M1 value). Every other type is proven unable to.
OVERFLOWING = [T.Q8_1, T.Q8_K, T.MXFP4]
#: The stored bits of 1.0 in each scale encoding: a field at 1.0 decodes to at most its factor.
ONE_BITS = {Encoding.F16: 0x3C00, Encoding.IQ1M_F16: 0x3C00, Encoding.F32: 0x3F80_0000, Encoding.E8M0: 127,
            Encoding.UE4M3: 0x38}
#: The stored bits of each scale encoding's largest finite value.
MAX_BITS = {Encoding.F16: 0x7BFF, Encoding.IQ1M_F16: 0x7BFF, Encoding.F32: 0x7F7F_FFFF, Encoding.E8M0: 0xFE,
            Encoding.UE4M3: 0xFF}
#: (type, field) for every field a decoded value is a multiple of.
SCALING = [(t, f) for t in QUANT_TYPES for f in layout_of(t).fields if f.factor]
#: Worked out by hand: the largest field value whose worst block decodes finite, and the next one.
#: Q8_K/Q8_1: d x -128 is exact, so the edge is FLT_MAX / 128 (a float32: 128 is a power of two), and the
#: next float32, 2^121, makes -2^128. MXFP4: 6 x 2^125 = 1.5 x 2^127 is finite (0xFC), 6 x 2^126 is not.
EDGES = {T.Q8_K: (FLT_MAX / 128, 2.0 ** 121), T.Q8_1: (FLT_MAX / 128, 2.0 ** 121), T.MXFP4: (2.0 ** 125, 2.0 ** 126)}


def _ggml_decode(blocks: np.ndarray, ggml_type: T) -> np.ndarray:
    """Q8_K, Q8_1 and Q1_0 decoded by ggml's formula (gguf.quants has no decoder for them), per
    ggml/src/ggml-quants.c. dequantize_row_q8_K: ``*y++ = x[i].d * x[i].qs[j]``, float32 d times an int8
    quant, in float32. ggml has no dequantize_row_q8_1 (it is commented out in ggml-quants.h); its
    quantize_row_q8_1_ref stores ``qs[j] = roundf(x[j] / d)``, so a value is d x qs[j] too, here in
    gguf-py's 40-byte block (f32 d, f32 s, int8 qs[32]; Q8_K: f32 d, int8 qs[256], int16 bsums[16]).
    dequantize_row_q1_0: ``y[j] = bit ? d : -d`` with f16 d and one bit per value."""
    lay = layout_of(ggml_type)
    raw = np.ascontiguousarray(blocks, np.uint8).reshape(-1, lay.block_bytes)
    if ggml_type is T.Q1_0:
        d = raw[:, :2].copy().view("<f2").astype(np.float32)
        bits = np.unpackbits(raw[:, 2:], axis=1, bitorder="little")
        return np.where(bits == 1, d, -d)
    d = raw[:, :4].copy().view("<f4")
    start = 4 if ggml_type is T.Q8_K else 8
    qs = raw[:, start:start + lay.block_size].view(np.int8)
    with np.errstate(over="ignore"):
        return d * qs.astype(np.float32)


def _decode_any(blocks: np.ndarray, ggml_type: T) -> np.ndarray:
    """(n, block bytes) -> (n, block size): by gguf.quants where it decodes the type, else ggml's formula."""
    if not deep_supported(ggml_type):
        return _ggml_decode(blocks, ggml_type)
    with np.errstate(all="ignore"):
        decoded = gguf.quants.dequantize(np.ascontiguousarray(blocks).reshape(-1), ggml_type)
    return decoded.reshape(len(blocks), layout_of(ggml_type).block_size)


def _candidates(ggml_type: T) -> np.ndarray:
    """Blocks whose bytes are each uniform fill 0x00..0xFF, then random ones: among them are blocks whose
    quants and sub-scales reach the type's largest |value| (test_factor_... proves they do)."""
    bb = layout_of(ggml_type).block_bytes
    fills = np.repeat(np.arange(256, dtype=np.uint8)[:, None], bb, axis=1)
    return np.concatenate([fills, np.random.default_rng(7).integers(0, 256, (1024, bb), dtype=np.uint8)])


def _with_fields(blocks: np.ndarray, ggml_type: T, bits: dict[str, int]) -> np.ndarray:
    """A copy of ``blocks`` whose fields named in ``bits`` hold those bits (IQ1_M: its sub-scales kept)."""
    lay = layout_of(ggml_type)
    out = blocks.copy()
    for v in range(len(out)):
        buf = bytearray(out[v].tobytes())
        for f in lay.fields:
            if f.name in bits:
                poke(buf, lay, 0, f, bits[f.name])
        out[v] = np.frombuffer(buf, np.uint8)
    return out


def _column_magnitude(blocks: np.ndarray, ggml_type: T, f: FloatField) -> np.ndarray:
    """Per block, the largest |decoded value| among the columns ``f`` scales."""
    return np.abs(_decode_any(blocks, ggml_type)[:, f.first_col:f.first_col + f.width]).max(axis=1)


def _worst_block(ggml_type: T, f: FloatField) -> tuple[np.ndarray, np.ndarray]:
    """(the candidate blocks with ``f`` at 1.0 and every other field 0, their largest |value| each)."""
    zeros = {g.name: 0 for g in layout_of(ggml_type).fields}
    blocks = _with_fields(_candidates(ggml_type), ggml_type, {**zeros, f.name: ONE_BITS[f.encoding]})
    return blocks, _column_magnitude(blocks, ggml_type, f)


def test_encoding_max_is_each_encodings_largest_finite_value() -> None:
    for encoding, top in ((Encoding.F16, 0xFFFF), (Encoding.BF16, 0xFFFF), (Encoding.E8M0, 0xFF),
                          (Encoding.UE4M3, 0xFF), (Encoding.E4M3, 0xFF)):
        values = np.abs(decode_bits(encoding, np.arange(top + 1)))
        assert values[np.isfinite(values)].max() == ENCODING_MAX[encoding], encoding
    assert ENCODING_MAX[Encoding.F32] == FLT_MAX == float(np.finfo(np.float32).max)
    assert ENCODING_MAX[Encoding.F64] == float(np.finfo(np.float64).max)
    for encoding, bits in MAX_BITS.items():
        assert float(decode_bits(encoding, np.array(bits))) == ENCODING_MAX[encoding], encoding


@pytest.mark.parametrize("ggml_type,f", SCALING, ids=lambda x: x.name if isinstance(x, (T, FloatField)) else x)
def test_factor_is_the_largest_decoded_magnitude_and_the_largest_field_decodes_to_the_bound(
        ggml_type: T, f: FloatField) -> None:
    blocks, magnitude = _worst_block(ggml_type, f)
    assert magnitude.max() == f.factor                  # reached by some block, passed by none
    worst = blocks[int(np.argmax(magnitude))][None]
    at_max = _column_magnitude(_with_fields(worst, ggml_type, {f.name: MAX_BITS[f.encoding]}), ggml_type, f)[0]
    zeros = {g.name: 0.0 for g in layout_of(ggml_type).fields}
    bound = layout_of(ggml_type).magnitude_bound({**zeros, f.name: ENCODING_MAX[f.encoding]})
    if ggml_type in OVERFLOWING:
        assert bound > FLT_MAX and at_max == np.inf     # the encoding's largest finite value overflows
    else:
        # The largest finite field value cannot overflow: its worst block decodes to the bound, finite.
        assert bound < FLT_MAX and at_max == pytest.approx(bound, rel=2.0 ** -20)


@pytest.mark.parametrize("ggml_type", [t for t in QUANT_TYPES if deep_supported(t)
                                       and len([f for f in layout_of(t).fields if f.factor]) > 1
                                       and t is not T.NVFP4], ids=lambda t: t.name)
def test_fields_scaling_the_same_columns_add_up_to_the_block_bound(ggml_type: T) -> None:
    # d x sub x q - dmin x min (Q4_1, Q5_1: d x q + m): a field's sign decides whether the terms add.
    lay = layout_of(ggml_type)
    assert all(f.encoding is Encoding.F16 for f in lay.fields)
    largest = 0.0
    for signs in itertools.product((0, 0x8000), repeat=len(lay.fields)):
        bits = {f.name: ONE_BITS[f.encoding] | s for f, s in zip(lay.fields, signs, strict=True)}
        blocks = _with_fields(_candidates(ggml_type), ggml_type, bits)
        largest = max(largest, float(np.abs(_decode_any(blocks, ggml_type)).max()))
    assert largest == lay.magnitude_bound(dict.fromkeys((f.name for f in lay.fields), -1.0)) > max(
        f.factor for f in lay.fields)


@pytest.mark.parametrize("ggml_type", list(LAYOUTS), ids=lambda t: t.name)
def test_every_type_cannot_overflow_or_is_decoded_from_its_overflow_floor(ggml_type: T) -> None:
    lay = layout_of(ggml_type)
    largest = lay.magnitude_bound({f.name: ENCODING_MAX[f.encoding] for f in lay.fields})
    if lay.is_integer or lay.is_float_elements:
        # Nothing multiplies an element: it is its own value, non-finite only when stored so.
        assert not lay.can_overflow and all(lay.overflow_floor(f) == math.inf for f in lay.fields)
    elif ggml_type in OVERFLOWING:
        assert lay.can_overflow and largest > FLT_MAX
    else:
        # Proven from the table: every field at its largest finite value (an f16 65504, Q6_K: x 4096)
        # bounds the block far below FLT_MAX, so no finite block of this type decodes to Inf.
        assert not lay.can_overflow and largest * ROUNDING_MARGIN < FLT_MAX
    assert (ggml_type in OVERFLOW_KEY) == lay.can_overflow
    for f in lay.fields if lay.can_overflow else ():
        key, floor = OVERFLOW_KEY[ggml_type][f.name], lay.overflow_floor(f)
        if floor == math.inf:           # Q8_1's s: no value is a multiple of it
            assert f.factor == 0 and key == MAX_BITS[f.encoding] + 1
        else:                           # the scan decodes a block from the first key reaching its floor
            assert float(decode_bits(f.encoding, np.array(key - 1))) < floor <= float(
                decode_bits(f.encoding, np.array(key)))


def _write_row(path: Path, ggml_type: T, blocks: np.ndarray, name: str = "x") -> int:
    """A GGUF holding ``blocks`` as one row of tensor ``name``; the tensor's offset."""
    lay = layout_of(ggml_type)
    return write_gguf(path, [TensorSpec(name, ggml_type, (lay.block_size * len(blocks), 1),
                                        np.ascontiguousarray(blocks).tobytes())])[name]


@pytest.mark.parametrize("ggml_type", OVERFLOWING, ids=lambda t: t.name)
def test_overflow_edge_decodes_as_the_scan_says(tmp_path: Path, ggml_type: T) -> None:
    lay = layout_of(ggml_type)
    (f,) = [g for g in lay.fields if g.factor]
    blocks, magnitude = _worst_block(ggml_type, f)
    worst = blocks[int(np.argmax(magnitude))][None]

    def finite_at(bits: int) -> bool:
        return bool(np.isfinite(_decode_any(_with_fields(worst, ggml_type, {f.name: bits}), ggml_type)).all())

    trigger = OVERFLOW_KEY[ggml_type][f.name]
    assert finite_at(trigger - 1)                 # below the floor, as the table's bound says
    lo, hi = trigger - 1, MAX_BITS[f.encoding]    # the decode grows with the field: bisect its edge
    assert not finite_at(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if finite_at(mid) else (lo, mid)
    edge = (float(decode_bits(f.encoding, np.array(lo))), float(decode_bits(f.encoding, np.array(hi))))
    assert edge == EDGES[ggml_type] and trigger <= hi
    # The scan decodes the blocks from the floor up, exactly: only the one past the edge is a finding.
    row = np.concatenate([_with_fields(worst, ggml_type, {f.name: b}) for b in (trigger - 1, lo, hi)])
    offset = _write_row(tmp_path / "m.gguf", ggml_type, row)
    inf = _decode_any(row[2:], ggml_type)[0]
    kind = "+inf" if inf[np.flatnonzero(~np.isfinite(inf))[0]] > 0 else "-inf"
    (t,) = scan(tmp_path / "m.gguf").tensors
    assert [(x.kind, x.cause, x.row, x.block, x.field, x.offset, x.bits, x.value) for x in t.findings] == [
        (kind, "overflow", 0, 2, f.name, offset + 2 * lay.block_bytes + f.offset, f"0x{hi:0{2 * f.size}x}", edge[1])]


def _q8_blocks(ggml_type: T, n: int, huge_at: int) -> np.ndarray:
    """``n`` blocks with d = 0.01 and random quants, but block ``huge_at``: d = 3e38, every quant 127."""
    lay = layout_of(ggml_type)
    blocks = np.random.default_rng(1).integers(0, 256, (n, lay.block_bytes), dtype=np.uint8)
    start = 4 if ggml_type is T.Q8_K else 8
    blocks[:, :4] = np.frombuffer(np.float32(0.01).tobytes(), np.uint8)
    if ggml_type is T.Q8_1:
        blocks[:, 4:8] = 0          # s: d x sum(qs), finite
    blocks[huge_at, :4] = np.frombuffer(np.float32(3e38).tobytes(), np.uint8)
    blocks[huge_at, start:start + lay.block_size] = 127
    return blocks


def _overflowing_model(path: str, ggml_type: T) -> int:
    """The issue's block: f32 d = 3e38, qs = 127 decodes to 3.81e40, +Inf in float32, in ggml; written at row 2,
    block 1 of a 4-row table at ``path``; returns its offset."""
    lay = layout_of(ggml_type)
    per_row = 2
    blocks = _q8_blocks(ggml_type, 4 * per_row, huge_at=2 * per_row + 1)     # row 2, block 1
    offset = write_gguf(path, [TensorSpec("blk.0.ffn_down.weight", ggml_type, (per_row * lay.block_size, 4),
                                          blocks.tobytes())])["blk.0.ffn_down.weight"]
    assert np.isposinf(_ggml_decode(blocks[5:6], ggml_type)).all()
    return offset + 5 * lay.block_bytes


@pytest.mark.parametrize("ggml_type", [T.Q8_K, T.Q8_1], ids=lambda t: t.name)
def test_scan_cli_finds_a_finite_f32_scale_that_decodes_to_inf(tmp_path: Path, ggml_type: T) -> None:
    lay = layout_of(ggml_type)
    path = str(tmp_path / "m.gguf")
    at = _overflowing_model(path, ggml_type)
    expected = {"kind": "+inf", "row": 2, "column": lay.block_size, "block": 1, "field": "d", "offset": at,
                "bits": "0x7f61b1e6", "width": lay.block_size, "size": 4, "value": float(np.float32(3e38)),
                "cause": "overflow", "expert": None}
    for args in (["scan", path, "--json"], ["scan", "--deep", path, "--json"]):
        result = run_cli(args)
        assert result.exit_code == 1, result.output
        (tensor,) = json.loads(result.stdout)["models"][0]["tensors"]
        assert (tensor["name"], tensor["findings"]) == ("blk.0.ffn_down.weight", [expected])
    text = run_cli(["scan", path])
    assert text.exit_code == 1
    (line,) = [x for x in text.stdout.splitlines() if x.startswith("  +inf at file ")]
    assert line.endswith(f" offset {at}, length 4: tensor blk.0.ffn_down.weight, row 2, block 1, columns "
                         f"{lay.block_size}..{2 * lay.block_size - 1}, field d: expected finite, got 0x7f61b1e6 "
                         "(3e+38), a finite scale that overflows to +inf when decoded")


def test_reader_processes_find_each_types_finite_scale_that_decodes_to_inf(tmp_path: Path) -> None:
    # One pool of reader processes for both types: starting one costs 3.5 s under Wine.
    with reader_pool():
        for ggml_type in (T.Q8_K, T.Q8_1):
            path = str(tmp_path / f"{ggml_type.name}.gguf")
            at = _overflowing_model(path, ggml_type)
            (workers,) = scan(path, workers=1).tensors
            assert [(x.row, x.block, x.offset, x.kind, x.cause) for x in workers.findings] == \
                [(2, 1, at, "+inf", "overflow")], ggml_type.name


def test_rows_finiteness_finds_an_embedding_row_whose_scale_overflows(tmp_path: Path) -> None:
    path = str(tmp_path / "m.gguf")
    blocks = _q8_blocks(T.Q8_K, 8, huge_at=3)             # one block a row: row 3
    offset = write_gguf(path, [TensorSpec("token_embd.weight", T.Q8_K, (256, 8), blocks.tobytes())],
                        {"general.architecture": "llama"})["token_embd.weight"]
    result = run_cli(["rows", path, "--ids", "0-7", "--modes", "buffered", "--json"])
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)["models"][0]
    assert (doc["nonfinite_rows"], doc["delivered"]) == (1, True)
    assert doc["first_nonfinite"] == {"kind": "+inf", "row": 3, "block": 0, "column": 0, "field": "d",
                                      "offset": offset + 3 * 292, "bits": "0x7f61b1e6", "cause": "overflow"}
    clean = run_cli(["rows", path, "--ids", "0-2,4-7", "--modes", "buffered"])
    assert clean.exit_code == 0, clean.output
