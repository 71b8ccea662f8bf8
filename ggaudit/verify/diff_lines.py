"""The lines of diff's findings in metadata and tensors, as the text report prints them and
:meth:`DiffReport.diagnostics` says them (the structure's are :mod:`.diff_structure`'s)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lines import format_value, plural, shape_text, show_value, verb
from ..text import escape, escape_path

if TYPE_CHECKING:
    from .diff import FirstDifference, LayoutChange, TensorDataDiff, ValueChange
    from .diff_meta import MetadataChange

__all__ = ["HEX_LINE", "MAX_HEX_LINES", "describe_data_diff", "describe_layout_change", "describe_metadata_change",
           "describe_only", "describe_value_changes", "hex_window"]


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


def describe_layout_change(c: LayoutChange) -> str:
    return (f"CHANGED tensor {escape(c.name)}: {c.what}: {c.type_a} {shape_text(c.shape_a)} -> "
            f"{c.type_b} {shape_text(c.shape_b)}")


def describe_data_diff(d: TensorDataDiff) -> list[str]:
    """fio style: where (files, offsets, length; tensor, row, then the element's column or the block and
    its columns), then A before B: the bytes that differ within the block, marked, and the values they
    change, decoded."""
    f = d.first
    element = f.columns == 1
    where = f"column {f.column}" if element else f"block {f.block}, columns {f.column}..{f.column + f.columns - 1}"
    return [
        f"DIFFER tensor {escape(d.name)} ({d.ggml_type} {shape_text(d.shape)}): {d.rows_differing} of "
        f"{plural(d.n_rows, 'row')} {verb(d.rows_differing)}",
        f"  first at row {f.row}, {where}, byte {f.byte_in_block} of the {f.block_bytes}-byte "
        f"{'element' if element else 'block'}",
        f"  a: file {escape_path(d.path_a)}, offset {f.offset_a}, length {f.block_bytes}",
        f"  b: file {escape_path(d.path_b)}, offset {f.offset_b}, length {f.block_bytes}",
        *hex_window(f.raw_a, f.raw_b),
        *describe_value_changes(f),
    ]


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


def describe_value_changes(f: FirstDifference) -> list[str]:
    """The values the differing bytes change, A -> B: the element, the scale field, or else the block's
    dequantized elements (the first few, with how many differ)."""
    lines = [_value_change(c) for c in f.changes if c.what != "decoded"]
    decoded = [c for c in f.changes if c.what == "decoded"]
    if decoded:
        lines.append(f"  dequantized: {f.decoded_differing} of {plural(f.columns, 'column')} "
                     f"{verb(f.decoded_differing)}")
        lines.extend(f"    column {c.column}: {_a_to_b(c)}" for c in decoded)
        if f.decoded_differing > len(decoded):
            lines.append(f"    ... and {f.decoded_differing - len(decoded)} more (--json lists the first "
                         f"{len(decoded)} too; dequantize the block for all)")
    return lines


def _value_change(c: ValueChange) -> str:
    if c.what == "element":
        return f"  value at column {c.column} ({c.encoding}): {_a_to_b(c)}"
    cols = f"column {c.column}" if c.columns == 1 else f"columns {c.column}..{c.column + c.columns - 1}"
    return f"  field {escape(c.name)} (scales {cols}, {c.encoding}): {_a_to_b(c)}"


def _a_to_b(c: ValueChange) -> str:
    return f"{format_value(c.a, c.encoding)} -> {format_value(c.b, c.encoding)}"
