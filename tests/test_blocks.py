"""Proof of every row of the block table (ggaudit.format.blocks.LAYOUTS) against gguf.quants' decoders.

For each quantized type gguf.quants can decode: poisoning the named float field of the middle block of
three with NaN/Inf bits makes exactly that block (and only the columns the field scales) decode
non-finite, while any value in any other byte of the block leaves every decoded value finite. That is
what lets the fast scan read only these fields.

gguf.quants has no decoder for Q8_1, Q8_K, Q1_0 (and F64): their rows rest on ggml's struct layout
(Q8_K: f32 d first; Q8_1 as gguf-py sizes it: f32 d, f32 s; Q1_0: f16 d then sign bits) and are
checked by the exact-position scan tests only. test_undecodable_types_still_undecodable fails the
day gguf gains a decoder, so the proof can be extended then.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES
import gguf.quants

from ggaudit.format.blocks import LAYOUTS, Encoding, GGMLQuantizationType as T, decode_bits, layout_of
from ggaudit.scan.run import deep_supported

from scan_support import FLOAT_TYPES, INTEGER_TYPES, NONFINITE_BITS, QUANT_TYPES, finite_tensor, poke
import itertools

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
