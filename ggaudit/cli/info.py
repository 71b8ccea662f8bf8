"""``ggaudit info``: the model's header, metadata and tensor table."""

from __future__ import annotations

from typing import Any

import click

from ..info import bytes_per_type, model_to_json
from ..layout import ArrayValue, MetaValue, Model, open_model
from ..text import escape
from .common import EXIT_CLEAN, emit_json, handle_errors

#: Longest string value shown in text output; JSON carries the whole value.
MAX_SHOWN = 80


@click.command()
@click.argument("model")
@click.option("--json", "as_json", is_flag=True, help="Print the documented JSON object instead of text.")
@handle_errors
def info(model: str, as_json: bool) -> None:
    """Show MODEL's header, metadata and tensor table (a file, or any shard of a split set)."""
    opened = open_model(model)
    if as_json:
        emit_json(model_to_json(opened))
    else:
        for line in render_info(opened):
            click.echo(line)
    raise SystemExit(EXIT_CLEAN)


def _shown(value: Any) -> str:
    if isinstance(value, ArrayValue):
        head = ", ".join(_shown(v) for v in value.head)
        more = ", ..." if value.count > len(value.head) else ""
        return f"[{value.elem_type.name.lower()} x {value.count}] [{head}{more}]"
    if isinstance(value, str):
        text = escape(value)
        if len(text) > MAX_SHOWN:
            return f"'{text[:MAX_SHOWN]}...' ({len(value)} chars)"
        return f"'{text}'"
    return str(value)


def _meta_line(key: str, entry: MetaValue) -> str:
    return f"  {escape(key)} ({entry.type.name.lower()}) = {_shown(entry.value)}"


def render_info(model: Model) -> list[str]:
    lines = [f"model: {escape(model.source)}"]
    for f in model.files:
        lines.append(f"file: {escape(f.path)}: GGUF v{f.version}, {f.size} bytes, alignment {f.alignment}, "
                     f"data at offset {f.data_offset}, {len(f.tensors)} tensors, {len(f.metadata)} metadata keys")
    lines.append(f"architecture: {escape(model.architecture or '(none)')}")
    lines.append(f"tensors: {len(model.tensors)}")
    lines.append("metadata:")
    lines.extend(_meta_line(k, v) for k, v in model.metadata.items())
    lines.append("tensors:")
    width = max([4] + [len(escape(t.name)) for t in model.tensors])
    lines.append(f"  {'name':<{width}}  {'type':<8} {'shape':<20} {'offset':>14} {'bytes':>14}")
    for t in model.tensors:
        shape = "x".join(str(n) for n in t.shape)
        lines.append(f"  {escape(t.name):<{width}}  {t.ggml_type.name:<8} {shape:<20} {t.offset:>14} {t.nbytes:>14}")
    lines.append("bytes per type:")
    lines.extend(f"  {name:<8} {nbytes:>14}" for name, nbytes in bytes_per_type(model.tensors).items())
    return lines
