"""The values of blocks that decode to ``d*q + m`` (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K), without gguf.

The anomaly check decodes a few blocks of these types (:func:`ggaudit.scan.anomalies.centering`), and
it needs each block's values, not their order; importing gguf for it (yaml with it) would cost a plain
``scan --anomalies`` a tenth of its time. So this module computes each block's values itself, in an
order of its own, and tests/test_affine.py checks them against ``gguf.quants.dequantize`` as multisets.
The byte positions follow ggml's ``block_q4_1`` ... ``block_q5_K`` (``ggml-common.h``); d and dmin sit
where :mod:`ggaudit.format.blocks` says.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .blocks import GGMLQuantizationType as T, layout_of

__all__ = ["TYPES", "block_values"]


def _field(blocks: np.ndarray, ggml_type: T, name: str) -> np.ndarray:
    """The f16 field ``name`` of each block as float32, (n, 1)."""
    f = next(f for f in layout_of(ggml_type).fields if f.name == name)
    return np.ascontiguousarray(blocks[:, f.offset:f.offset + 2]).view("<f2").astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """Low nibbles then high nibbles of ``qs`` (..., k): (..., 2, k)."""
    return np.stack([qs & 0x0F, qs >> 4], axis=-2)


def _q4_1(blocks: np.ndarray) -> np.ndarray:
    q = _nibbles(blocks[:, 4:20]).reshape(len(blocks), -1)
    values: np.ndarray = q * _field(blocks, T.Q4_1, "d") + _field(blocks, T.Q4_1, "m")
    return values


def _q5_1(blocks: np.ndarray) -> np.ndarray:
    qh = np.ascontiguousarray(blocks[:, 4:8]).view("<u4")                    # (n, 1): bit j is element j's 5th bit
    high = ((qh >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8) << 4
    q = _nibbles(blocks[:, 8:24]).reshape(len(blocks), -1) | high
    values: np.ndarray = q * _field(blocks, T.Q5_1, "d") + _field(blocks, T.Q5_1, "m")
    return values


def _scales_k4(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The eight 6-bit scales and mins of Q4_K/Q5_K from their 12 packed bytes (ggml's
    ``get_scale_min_k4``): each (n, 8)."""
    p = packed.astype(np.uint8)
    low_sc, low_m, top = p[:, 0:4] & 63, p[:, 4:8] & 63, p[:, 8:12]
    high_sc = (top & 0x0F) | ((p[:, 0:4] >> 6) << 4)
    high_m = (top >> 4) | ((p[:, 4:8] >> 6) << 4)
    return np.concatenate([low_sc, high_sc], axis=1), np.concatenate([low_m, high_m], axis=1)


def _k_quant(blocks: np.ndarray, ggml_type: T, q: np.ndarray) -> np.ndarray:
    """Q4_K/Q5_K values from their quants ``q`` (n, 8 sub-blocks, 32)."""
    sc, m = _scales_k4(blocks[:, 4:16])
    d, dmin = _field(blocks, ggml_type, "d"), _field(blocks, ggml_type, "dmin")
    values: np.ndarray = ((d * sc)[..., None] * q - (dmin * m)[..., None]).reshape(len(blocks), -1)
    return values


def _q4_k(blocks: np.ndarray) -> np.ndarray:
    # Each 32 bytes of qs hold sub-blocks 2j (low nibbles) and 2j+1 (high nibbles).
    q = _nibbles(blocks[:, 16:144].reshape(-1, 4, 32)).reshape(len(blocks), 8, 32)
    return _k_quant(blocks, T.Q4_K, q)


def _q5_k(blocks: np.ndarray) -> np.ndarray:
    q = _nibbles(blocks[:, 48:176].reshape(-1, 4, 32)).reshape(len(blocks), 8, 32)
    qh = blocks[:, 16:48]                                          # bit s of byte l: element l of sub-block s
    high = ((qh[:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1) << 4
    return _k_quant(blocks, T.Q5_K, q | high)


def _q2_k(blocks: np.ndarray) -> np.ndarray:
    n = len(blocks)
    scales = blocks[:, 0:16]                                       # sub-block s: scale low nibble, min high
    qs = blocks[:, 16:80].reshape(n, 2, 1, 2, 16)                  # halves of 128, shift, 16-byte groups
    shifts = np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1, 1)
    q = ((qs >> shifts) & 3).reshape(n, 16, 16)                   # sub-blocks in ggml's order of scales
    d, dmin = _field(blocks, T.Q2_K, "d"), _field(blocks, T.Q2_K, "dmin")
    values: np.ndarray = ((d * (scales & 0x0F))[..., None] * q - (dmin * (scales >> 4))[..., None]).reshape(n, -1)
    return values


_DECODERS: dict[T, Callable[[np.ndarray], np.ndarray]] = {
    T.Q4_1: _q4_1, T.Q5_1: _q5_1, T.Q2_K: _q2_k, T.Q4_K: _q4_k, T.Q5_K: _q5_k}
#: The types :func:`block_values` decodes.
TYPES: frozenset[T] = frozenset(_DECODERS)


def block_values(data: np.ndarray, ggml_type: T) -> np.ndarray:
    """The values of each whole block of ``data`` (uint8, a multiple of the block size) of ``ggml_type``
    (one of TYPES): (blocks, elements per block) float32, each row in an order of this module's own."""
    layout = layout_of(ggml_type)
    blocks = np.asarray(data, np.uint8).reshape(-1, layout.block_bytes)
    return _DECODERS[ggml_type](blocks).astype(np.float32)
