"""``ggaudit manifest``: write a tensor manifest (file sha256, per-tensor and per-row-group xxh3-128)."""

from __future__ import annotations

import click

from ..batch import run_models
from ..format.layout import open_model
from ..format.locate import description_files, resolve_model
from ..verify.manifests.tensor import DEFAULT_GROUP_BYTES, build_tensor_manifest, check_output, write_tensor_manifest
from .common import STDOUT, ManifestWritten, PathParam, handle_errors
from .reporters import emit_outcomes, format_options


@click.command()
@click.argument("model")
@click.option("-o", "--output", required=True, type=PathParam(dir_okay=False),
              help="Manifest file to write ('-' for stdout). Never one of MODEL's files.")
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists (atomically).")
@click.option("--group-bytes", type=click.IntRange(min=1), default=DEFAULT_GROUP_BYTES, show_default=True,
              help="Target size of a row group (whole rows, at least one).")
@click.option("--store", type=PathParam(file_okay=False), help="Ollama store root for ollama:NAME.")
@format_options
@handle_errors
def manifest(model: str, output: str, force: bool, group_bytes: int, store: str | None, fmt: str) -> None:
    """Write MODEL's tensor manifest to OUTPUT, reading each file once.

    MODEL is a GGUF file, any shard of a split set, or ollama:NAME (its model layer and, if it has one,
    its projector). OUTPUT '-' prints the manifest on stdout (with --json, inside the JSON every command
    prints); an existing OUTPUT is replaced only with --force, atomically, and never when it is one of
    MODEL's files.
    Check it later with `ggaudit verify MODEL --manifest OUTPUT`.
    """
    def make(_: str) -> ManifestWritten:
        models = [open_model(path) for path in resolve_model(model, store=store)]
        inputs = [f.path for m in models for f in m.files] + description_files(model, store=store)
        if output != STDOUT:
            check_output(output, replace=force, inputs=inputs, replace_with="--force")   # before the reads
        built = build_tensor_manifest(models, group_bytes=group_bytes)
        if output != STDOUT:
            write_tensor_manifest(built, output, replace=force, inputs=inputs)
        return ManifestWritten(output=output, manifest=built)

    raise SystemExit(emit_outcomes(run_models([model], make), fmt))
