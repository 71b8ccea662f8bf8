"""``ggaudit manifest``: write a tensor manifest (file sha256, per-tensor and per-row-group xxh3-128)."""

from __future__ import annotations

import click

from ..layout import open_model
from ..locate import resolve_model
from ..manifests.tensor import (DEFAULT_GROUP_BYTES, build_tensor_manifest, tensor_manifest_to_json,
                               write_tensor_manifest)
from ..text import escape, escape_path
from .common import EXIT_CLEAN, PathParam, emit_json, handle_errors


@click.command()
@click.argument("model")
@click.option("-o", "--output", required=True, type=PathParam(dir_okay=False), help="Manifest file to write.")
@click.option("--group-bytes", type=click.IntRange(min=1), default=DEFAULT_GROUP_BYTES, show_default=True,
              help="Target size of a row group (whole rows, at least one).")
@click.option("--store", type=PathParam(file_okay=False), help="Ollama store root for ollama:NAME.")
@click.option("--json", "as_json", is_flag=True, help="Also print the manifest as JSON on stdout.")
@handle_errors
def manifest(model: str, output: str, group_bytes: int, store: str | None, as_json: bool) -> None:
    """Write MODEL's tensor manifest to OUTPUT, reading each file once.

    MODEL is a GGUF file, any shard of a split set, or ollama:NAME (its model layer and, if it has one,
    its projector).
    Check it later with `ggaudit verify MODEL --manifest OUTPUT`.
    """
    built = build_tensor_manifest([open_model(path) for path in resolve_model(model, store=store)], group_bytes)
    write_tensor_manifest(built, output)
    if as_json:
        emit_json(tensor_manifest_to_json(built))
    else:
        groups = sum(len(t.groups) for t in built.tensors)
        click.echo(f"wrote {escape_path(output)}: {len(built.files)} file(s), {len(built.tensors)} tensors, "
                   f"{groups} row groups")
        for f in built.files:
            click.echo(f"  {escape(f.name)}: {f.size} bytes, sha256 {f.sha256}")
    raise SystemExit(EXIT_CLEAN)
