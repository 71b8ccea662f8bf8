"""ggaudit.format.affine: each block's values, as gguf.quants.dequantize gives them (as multisets)."""

from __future__ import annotations

import gguf
import gguf.quants
import numpy as np
import pytest

from ggaudit.format.affine import TYPES, block_values
from ggaudit.format.blocks import GGMLQuantizationType as T, layout_of


def _random_blocks(ggml_type: T, n: int, seed: int) -> np.ndarray:
    """``n`` blocks of random bytes whose f16 fields hold finite values of either sign."""
    rng = np.random.default_rng(seed)
    layout = layout_of(ggml_type)
    blocks = rng.integers(0, 256, size=(n, layout.block_bytes), dtype=np.uint8)
    for f in layout.fields:
        values = rng.uniform(-2.0, 2.0, n).astype("<f2")
        blocks[:, f.offset:f.offset + 2] = values.view(np.uint8).reshape(n, 2)
    return blocks.reshape(-1)


@pytest.mark.parametrize("ggml_type", sorted(TYPES), ids=lambda t: T(t).name)
def test_block_values_are_gguf_s_values_of_each_block(ggml_type: T) -> None:
    data = _random_blocks(ggml_type, 64, seed=int(ggml_type))
    expected = gguf.quants.dequantize(data, gguf.GGMLQuantizationType(ggml_type)).reshape(64, -1)
    actual = block_values(data, ggml_type)
    assert actual.shape == expected.shape
    np.testing.assert_allclose(np.sort(actual, axis=1), np.sort(expected, axis=1), rtol=1e-6, atol=1e-7)


def test_types_are_every_type_whose_blocks_carry_a_minimum() -> None:
    with_minimum = {t for t in T if {"m", "dmin"} & {f.name for f in layout_of(t).fields}}
    assert with_minimum == TYPES
