"""Histograms of scale magnitudes: how many of a tensor's float fields (or elements) fall in each power of two.

Counted from the stored bits, never from decoded values, so the counts are exact and cheap: one shift and
one ``np.bincount`` per field and slice. What a scan accumulates per field is a small array of counts per
*code* (see :func:`count_codes`): the biased exponent for IEEE encodings (F16, BF16, F32, F64 and IQ1_M's
assembled f16), with zeros split out of the subnormal exponent, and the whole byte for the one-byte
encodings (E8M0, UE4M3, E4M3), whose meaning :func:`histogram_of` decides once, at the end. A tensor's
counts are at most 2049 integers per field however large it is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..format.blocks import Encoding, FloatField
from .report import ScaleHistogram

__all__ = ["count_codes", "histogram_of"]


@dataclass(frozen=True)
class _Ieee:
    """An IEEE binary format: exponent bits, mantissa bits, bias."""

    exponent_bits: int
    mantissa_bits: int
    bias: int

    @property
    def exponents(self) -> int:
        return 1 << self.exponent_bits


_IEEE: dict[Encoding, _Ieee] = {
    Encoding.F16: _Ieee(5, 10, 15), Encoding.IQ1M_F16: _Ieee(5, 10, 15), Encoding.BF16: _Ieee(8, 7, 127),
    Encoding.F32: _Ieee(8, 23, 127), Encoding.F64: _Ieee(11, 52, 1023),
}


def count_codes(encoding: Encoding, bits: np.ndarray) -> np.ndarray:
    """The counts per code of the stored values ``bits`` (1-D, unsigned, as wide as one value).

    IEEE: code ``e`` counts the values whose biased exponent is ``e`` (code 0: subnormals only), and the
    last code the zeros (either sign). The sign bit is shifted along with the exponent and the two halves
    folded, which spares a mask over every value; zeros are looked for only when exponent 0 occurs.
    """
    ieee = _IEEE.get(encoding)
    if ieee is None:
        return np.bincount(bits, minlength=256).astype(np.int64)
    top = bits >> bits.dtype.type(ieee.mantissa_bits)
    both = np.bincount(top.astype(np.intp, copy=False), minlength=2 * ieee.exponents)
    counts = np.zeros(ieee.exponents + 1, np.int64)
    counts[:-1] = both[:ieee.exponents] + both[ieee.exponents:]
    if counts[0]:
        magnitude = bits & bits.dtype.type((1 << (ieee.exponent_bits + ieee.mantissa_bits)) - 1)
        zeros = int(np.count_nonzero(magnitude == 0))
        counts[0] -= zeros
        counts[-1] = zeros
    return counts


def histogram_of(field: FloatField, counts: np.ndarray) -> ScaleHistogram:
    """The report's histogram of ``field`` from its accumulated code counts."""
    ieee = _IEEE.get(field.encoding)
    n = [int(c) for c in counts]
    if ieee is not None:
        top = ieee.exponents - 1
        powers = tuple((e - ieee.bias, n[e]) for e in range(1, top) if n[e])
        return ScaleHistogram(field=field.name, encoding=field.encoding.value, powers=powers, zero=n[-1],
                              subnormal=n[0], nonfinite=n[top])
    by_power: dict[int, int] = {}
    apart = {"zero": 0, "subnormal": 0, "nonfinite": 0}
    for byte, count in enumerate(n):
        kind = _byte_class(field.encoding, byte)
        if isinstance(kind, str):
            apart[kind] += count
        elif count:
            by_power[kind] = by_power.get(kind, 0) + count
    return ScaleHistogram(field=field.name, encoding=field.encoding.value, powers=tuple(sorted(by_power.items())),
                          **apart)


def _byte_class(encoding: Encoding, byte: int) -> int | str:
    """The power of two of a one-byte value, or "zero", "subnormal", "nonfinite" (as ggaudit decodes it:
    :mod:`ggaudit.format.blocks`)."""
    if encoding is Encoding.E8M0:
        return "nonfinite" if byte == 0xFF else byte - 127      # 2^(e-127); no zero, no subnormal
    magnitude = byte & 0x7F       # E4M3 and UE4M3: bias 7, subnormals at exponent 0
    if magnitude == 0x7F:
        # E4M3 (FP8 elements): NaN. UE4M3 (NVFP4 scales): zero, as ggml decodes it.
        return "nonfinite" if encoding is Encoding.E4M3 else "zero"
    exponent = magnitude >> 3
    if exponent == 0:
        return "zero" if magnitude == 0 else "subnormal"
    return exponent - 7
