"""``ggaudit info``: the model's header, metadata and tensor table."""

from __future__ import annotations

import click

from ..format.info import bytes_per_type, model_to_json
from ..batch import run_models
from ..format.layout import MetaValue, Model, open_model
from ..format.locate import resolve_model
from ..text import escape, escape_path
from .common import PathParam, emit_outcomes, expand_models, handle_errors, show_value


@click.command()
@click.argument("models", metavar="MODEL...", nargs=-1, required=True)
@click.option("--store", type=PathParam(file_okay=False), help="Ollama store root for ollama:NAME.")
@click.option("--json", "as_json", is_flag=True, help="Print the documented JSON object instead of text.")
@handle_errors
def info(models: tuple[str, ...], store: str | None, as_json: bool) -> None:
    """Show each MODEL's header, metadata and tensor table.

    MODEL is a GGUF file, any shard of a split set, or ollama:NAME (its model blob, then its
    projector's if it has one).
    """
    # A name expand_models could not resolve is resolved again here, so its error becomes its outcome.
    outcomes = run_models(expand_models(models, store), lambda m: open_model(resolve_model(m, store=store)[0]))
    raise SystemExit(emit_outcomes(outcomes, as_json=as_json, to_json=model_to_json, render=render_info,
                                   has_findings=lambda _: False))


def _meta_line(key: str, entry: MetaValue) -> str:
    return f"  {escape(key)} ({entry.type.name.lower()}) = {show_value(entry.value)}"


def render_info(model: Model) -> list[str]:
    lines = [f"model: {escape_path(model.source)}"]
    for f in model.files:
        lines.append(f"file: {escape_path(f.path)}: GGUF v{f.version}, {f.size} bytes, alignment {f.alignment}, "
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
