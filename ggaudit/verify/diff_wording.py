"""The words of diff's findings made below the report (metadata keys, a tensor in one model only, the bytes
of a block that differ), as the text report prints them and :meth:`DiffReport.diagnostics` says them; the
report's own records (changed layouts, differing data) are worded beside them in :mod:`.diff`, and the
structure's in :mod:`.diff_structure`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..wording import plural, show_value
from ..escaping import escape

if TYPE_CHECKING:
    from .diff_meta import MetadataChange

__all__ = ["HEX_LINE", "MAX_HEX_LINES", "describe_metadata_change", "describe_only", "hex_window"]


def describe_metadata_change(c: MetadataChange) -> str:
    key = escape(c.key)
    if c.what == "only-in-a":
        return f"ONLY-IN-A metadata {key} ({c.type_a}) = {show_value(c.value_a)}"
    if c.what == "only-in-b":
        return f"ONLY-IN-B metadata {key} ({c.type_b}) = {show_value(c.value_b)}"
    if c.what == "type":
        return f"CHANGED metadata {key}: type: {c.type_a} -> {c.type_b}"
    line = f"CHANGED metadata {key}: value: {show_value(c.value_a)} -> {show_value(c.value_b)}"
    if c.element is not None:
        gone = "(none)"
        line += (f", first at element {c.element}: "
                 f"{gone if c.element_a is None else show_value(c.element_a)} -> "
                 f"{gone if c.element_b is None else show_value(c.element_b)}")
    return line


def describe_only(side: str, name: str) -> str:
    """A tensor only model ``side`` ("a" or "b") holds."""
    return f"ONLY-IN-{side.upper()} tensor {escape(name)}"


#: Bytes shown a line by :func:`hex_window`, and at most how many lines of them (per side).
HEX_LINE = 16
MAX_HEX_LINES = 4


def hex_window(raw_a: bytes, raw_b: bytes) -> list[str]:
    """The lines of ``HEX_LINE`` bytes of a block that hold a differing byte (the first ``MAX_HEX_LINES``),
    A above B, each starting with its offset in the block, and ``^^`` under each byte that differs."""
    differs = [i for i, (x, y) in enumerate(zip(raw_a, raw_b, strict=False)) if x != y]
    starts = sorted({i - i % HEX_LINE for i in differs})[:MAX_HEX_LINES]
    width = len(str(starts[-1])) if starts else 1
    lines: list[str] = []
    for n, start in enumerate(starts):
        if n and start != starts[n - 1] + HEX_LINE:
            lines.append("  ...")
        a, b = raw_a[start:start + HEX_LINE], raw_b[start:start + HEX_LINE]
        head = f"  expected (a) +{start:<{width}}: "
        lines.append(head + a.hex(" "))
        lines.append(f"  actual   (b) +{start:<{width}}: " + b.hex(" "))
        lines.append(" " * len(head) + " ".join("^^" if x != y else "  " for x, y in zip(a, b, strict=False)).rstrip())
    hidden = [i for i in differs if starts and i >= starts[-1] + HEX_LINE]
    if hidden:
        lines.append(f"  ... and {plural(len(hidden), 'more differing byte')}, up to byte {hidden[-1]} "
                     f"(--json has the whole block)")
    return lines
