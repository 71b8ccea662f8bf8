"""The wording every job's findings share: counts that agree with their noun, floats as the shortest text
that reads back as the stored value, and where a finding is, fio style.

Each job's report builds its findings' lines (its ``diagnostics()`` messages) from these; the text
reporter prints the same lines, so a diagnostic's message is always the text report's line for it. The
bottom layer, beside :mod:`ggaudit.escaping`: it imports no job.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from .format.blocks import LAYOUTS, BlockLayout, GGMLQuantizationType
from .escaping import escape, escape_path

__all__ = ["MAX_SHOWN", "between", "block_layout", "format_value", "is_elements", "location", "plural", "shape_text",
           "show_value", "verb"]


def plural(n: int, noun: str, many: str | None = None) -> str:
    """``1 file``, ``2 files``; ``many`` for a noun whose plural is not noun + s (``mismatches``)."""
    return f"{n} {noun if n == 1 else many or noun + 's'}"


def joined(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``: names listed in a sentence ("" for none)."""
    items = list(items)
    return "" if not items else items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def verb(n: int, word: str = "differ") -> str:
    """The verb agreeing with a count as subject: ``1 differs``, ``2 differ``."""
    return word + "s" if n == 1 else word


def _narrowing(encoding: str | None) -> Callable[[float], float]:
    """How a text read back is rounded to the stored width ``encoding`` (an Encoding value); others are
    exact as float64. numpy is imported here, when a value is shown: the report types that use these lines
    load without it (``ggaudit scan --help``, tests/test_startup_cost.py)."""
    import numpy as np

    def bf16(x: float) -> float:      # via float32, to nearest even
        bits = int(np.float32(x).view(np.uint32))
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return float(np.uint32(bits).view(np.float32))

    narrow: dict[str, Callable[[float], float]] = {
        "f16": lambda x: float(np.float16(x)), "iq1m_f16": lambda x: float(np.float16(x)),
        "f32": lambda x: float(np.float32(x)), "bf16": bf16}
    return narrow.get(encoding or "", float)


def format_value(value: float | None, encoding: str | None = None) -> str:
    """A float for people: the shortest text that reads back as the value stored with ``encoding``
    (``f32``, ``f16``, ``bf16``, ...; None: a float64), so a float32 1e-06 is ``1e-06``;
    ``nan``/``+inf``/``-inf``; ``-`` for None."""
    if value is None:
        return "-"
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "+inf" if value > 0 else "-inf"
    import numpy as np

    narrow = _narrowing(encoding)
    # Below a million the integer digits are shown in full: -30, not -3e+01 (as %g does at 6 digits).
    whole = int(math.log10(abs(value))) + 1 if 1 <= abs(value) < 1e6 else 0
    with np.errstate(over="ignore"):    # a text that overflows the width does not read back: longer then
        for digits in range(1, 18):
            text = f"{value:.{max(digits, whole)}g}"
            if narrow(float(text)) == value:
                return text
    return repr(value)      # not a value of that width (the caller's width was wrong): exact as float64


def block_layout(ggml_type: str | None) -> BlockLayout | None:
    """The block facts of a type named in a report, if ggaudit has them."""
    known = GGMLQuantizationType.__members__.get(ggml_type or "")
    return None if known is None else LAYOUTS.get(known)


def is_elements(ggml_type: str) -> bool:
    """A type of one value a block (F32, F16, BF16, F64, and I8 holding FP8): its blocks are elements."""
    layout = block_layout(ggml_type)
    return layout is not None and layout.block_size == 1


def location(path: str, offset: int, length: int, *, tensor: str | None = None, expert: int | None = None,
             row: int | None = None, block: int | None = None, column: int | None = None,
             width: int | None = None) -> str:
    """Where a finding is, fio style: file, absolute offset and length first, then the tensor position."""
    parts = [f"file {escape_path(path)} offset {offset}, length {length}"]
    where = []
    if tensor is not None:
        where.append(f"tensor {escape(tensor)}")
    if expert is not None:
        where.append(f"expert {expert}")
    if row is not None:
        where.append(f"row {row}")
    if block is not None:
        where.append(f"block {block}")
    if column is not None:
        where.append(f"column {column}" if width in (None, 1) else f"columns {column}..{column + width - 1}")
    if where:
        parts.append(", ".join(where))
    return ": ".join(parts)


def between(after: str | None, before: str | None) -> str:
    """Where a region no tensor owns is: ``between tensor X and tensor Y``, ``after the header``, ..."""
    first = "the header" if after is None else f"tensor {escape(after)}"
    return f"after {first}" if before is None else f"between {first} and tensor {escape(before)}"


def shape_text(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


#: Longest string a metadata value shows before it is cut.
MAX_SHOWN = 80


def show_value(value: Any) -> str:
    """A metadata value for a terminal: escaped, quoted strings cut at MAX_SHOWN, arrays as type x count
    and their first elements."""
    from .format.layout import ArrayValue     # here: the header parser loads with a model, not with these lines

    if isinstance(value, ArrayValue):
        head = ", ".join(show_value(v) for v in value.head)
        more = ", ..." if value.count > len(value.head) else ""
        return f"[{value.elem_type.name.lower()} x {value.count}] [{head}{more}]"
    if isinstance(value, str):
        # Quotes inside are escaped too, or a tokenizer's quote token reads as three quotes. The
        # backslash itself is already escaped, so a backslash-quote can only mean a quote.
        text = escape(value).replace("'", "\\'")
        if len(text) > MAX_SHOWN:
            return f"'{text[:MAX_SHOWN]}...' ({len(value)} chars)"
        return f"'{text}'"
    return str(value)
