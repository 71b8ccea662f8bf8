"""``ggaudit manifest``: write a tensor manifest (file sha256, per-tensor and per-row-group xxh3-128)."""

from __future__ import annotations

import click

from ..format.layout import open_model
from ..format.locate import description_files, resolve_model
from ..verify.manifests.tensor import (DEFAULT_GROUP_BYTES, build_tensor_manifest, check_output,
                                       tensor_manifest_text, tensor_manifest_to_json, write_tensor_manifest)
from ..text import escape, escape_path
from .common import EXIT_CLEAN, PathParam, emit_json, handle_errors

#: -o - writes the manifest to stdout.
STDOUT = "-"


@click.command()
@click.argument("model")
@click.option("-o", "--output", required=True, type=PathParam(dir_okay=False),
              help="Manifest file to write ('-' for stdout). Never one of MODEL's files.")
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists (atomically).")
@click.option("--group-bytes", type=click.IntRange(min=1), default=DEFAULT_GROUP_BYTES, show_default=True,
              help="Target size of a row group (whole rows, at least one).")
@click.option("--store", type=PathParam(file_okay=False), help="Ollama store root for ollama:NAME.")
@click.option("--json", "as_json", is_flag=True, help="Also print the manifest as JSON on stdout.")
@handle_errors
def manifest(model: str, output: str, force: bool, group_bytes: int, store: str | None, as_json: bool) -> None:
    """Write MODEL's tensor manifest to OUTPUT, reading each file once.

    MODEL is a GGUF file, any shard of a split set, or ollama:NAME (its model layer and, if it has one,
    its projector). OUTPUT '-' prints the manifest on stdout; an existing OUTPUT is replaced only with
    --force, atomically, and never when it is one of MODEL's files.
    Check it later with `ggaudit verify MODEL --manifest OUTPUT`.
    """
    models = [open_model(path) for path in resolve_model(model, store=store)]
    inputs = [f.path for m in models for f in m.files] + description_files(model, store=store)
    if output != STDOUT:
        check_output(output, replace=force, inputs=inputs)   # before the reads, not after them
    built = build_tensor_manifest(models, group_bytes)
    if output == STDOUT:
        click.echo(tensor_manifest_text(built), nl=False)
        raise SystemExit(EXIT_CLEAN)
    write_tensor_manifest(built, output, replace=force, inputs=inputs)
    if as_json:
        emit_json(tensor_manifest_to_json(built))
    else:
        groups = sum(len(t.groups) for t in built.tensors)
        click.echo(f"wrote {escape_path(output)}: {len(built.files)} file(s), {len(built.tensors)} tensors, "
                   f"{groups} row groups")
        for f in built.files:
            click.echo(f"  {escape(f.name)}: {f.size} bytes, sha256 {f.sha256}")
    raise SystemExit(EXIT_CLEAN)
