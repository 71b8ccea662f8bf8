"""``ggaudit manifest``: write a tensor manifest (file sha256, per-tensor and per-row-group xxh3-128), or
llama.cpp's ``llama-gguf-hash`` lines."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import click

from ..errors import UsageError
from ..escaping import escape_path
from ..format.layout import Model, open_model
from ..io.fan_out import Progress
from ..io.output_files import STDOUT, check_output
from ..outcomes import run_models
from ..stores.locate import description_files, resolve_model
from ..verify.manifests.llama_hash import DEFAULT_TYPES, FORMAT as LLAMA_HASH
from ..verify.manifests.llama_hash import HASH_TYPES, build_llama_hash, hash_types, write_llama_hash
from ..verify.manifests.report import ManifestWritten
from ..verify.manifests.tensor import DEFAULT_GROUP_BYTES, TensorManifest, build_tensor_manifest, write_tensor_manifest
from .common import STORE_HELP, PathParam, handle_errors, hint, model_inputs, writing_to
from .progress import run_progress
from .reporters import Rendering, check_report_file, emit_outcomes, format_of, format_options_also, same_file

if TYPE_CHECKING:
    from ..scan.report import ScanReport

#: ``--manifest-format`` of ggaudit's own JSON tensor manifest.
GGAUDIT = "ggaudit"
#: The finding families (ggaudit.kinds) for which --require-clean writes no manifest.
REFUSED = ("nonfinite", "structure")


@click.command()
@click.argument("model")
@click.option("-o", "--output", required=True, type=PathParam(dir_okay=False),
              help="Manifest file to write ('-' for stdout). Never one of MODEL's files.")
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists (atomically).")
@click.option("--manifest-format", "manifest_format", type=click.Choice([GGAUDIT, LLAMA_HASH]), default=GGAUDIT,
              show_default=True, help="ggaudit: the JSON tensor manifest (row groups localise damage); "
              "llama-gguf-hash: llama.cpp's lines, as llama-gguf-hash prints them.")
@click.option("--hash", "hashes", metavar="TYPES",
              help=f"With --manifest-format {LLAMA_HASH}: comma-separated {', '.join(HASH_TYPES)}, or all "
                   f"[default: {','.join(DEFAULT_TYPES)}, as llama-gguf-hash's].")
@click.option("--group-bytes", type=click.IntRange(min=1), default=None,
              help=f"Target size of a row group (whole rows, at least one) [default: {DEFAULT_GROUP_BYTES}].")
@click.option("--store", type=PathParam(file_okay=False), help=STORE_HELP)
@click.option("--dask", "dask", metavar="ADDRESS|local[:N]",
              help="Hash each file on a Dask cluster (pip install 'ggaudit[dask]'): a scheduler's address, its "
                   "workers reading MODEL at the same path, or local[:N] worker processes here.")
@click.option("--require-clean", is_flag=True,
              help="Scan MODEL first and write no manifest when it holds NaN, Inf or structure findings (padding "
                   "that is not zeros, gaps, data after the last tensor): a manifest says the file is good.")
@format_options_also(LLAMA_HASH, output_flags=("--report",))
@handle_errors
def manifest(model: str, output: str, force: bool, manifest_format: str, hashes: str | None,
             group_bytes: int | None, store: str | None, dask: str | None, require_clean: bool,
             rendering: Rendering) -> None:
    """Write MODEL's tensor manifest to OUTPUT, reading each file once.

    MODEL is a GGUF file, any shard of a split set, or ollama:NAME (its model layer and, if it has one,
    its projector). OUTPUT '-' prints the manifest on stdout (with --json, inside the JSON every command
    prints); an existing OUTPUT is replaced only with --force, atomically, and never when it is one of
    MODEL's files.

    --manifest-format llama-gguf-hash writes llama.cpp's format instead (one line per hash, a block per
    file, named as MODEL's files are given here), which llama-gguf-hash --check reads too; --format
    llama-gguf-hash says the same. (Otherwise --format chooses how this command's result is printed,
    text or json, as for every command.)

    Check it later with `ggaudit verify MODEL --manifest OUTPUT`, which reads either format.
    """
    if LLAMA_HASH in rendering.formats:     # the issue's and llama.cpp users' spelling: the manifest's format
        manifest_format, rendering = LLAMA_HASH, _as_text(rendering, LLAMA_HASH)
    _refuse_report_name(output)
    llama = manifest_format == LLAMA_HASH
    if llama and group_bytes is not None:
        raise UsageError(None, f"--group-bytes is for the {GGAUDIT} manifest, not {LLAMA_HASH}")
    if not llama and hashes is not None:
        raise UsageError(None, f"--hash is for --manifest-format {LLAMA_HASH}")
    if llama and dask is not None:
        raise UsageError(None, f"--dask builds the {GGAUDIT} manifest, not {LLAMA_HASH}")
    try:
        types = hash_types(hashes.split(",")) if hashes is not None else DEFAULT_TYPES
    except UsageError as err:
        raise UsageError(None, err.message, field="--hash") from None

    def make(_: str, progress: Progress | None) -> ManifestWritten | ScanReport:
        models = [open_model(path) for path in resolve_model(model, store=store)]
        inputs = [f.path for m in models for f in m.files] + description_files(model, store=store)
        if output != STDOUT:
            check_output(output, replace=force, inputs=inputs, replace_with="--force")   # before the reads
        damaged = _damage(models) if require_clean else None
        if damaged is not None:
            return damaged      # its findings are the run's result (exit 1), and no manifest blesses them
        if llama:
            built_lines = build_llama_hash(models, types, progress=progress)
            if output != STDOUT:
                with writing_to(output, "the manifest"):
                    write_llama_hash(built_lines, output, replace=force, inputs=inputs)
            return ManifestWritten(output=output, manifest=built_lines)
        built = build_tensor_manifest(models, group_bytes=group_bytes or DEFAULT_GROUP_BYTES, progress=progress) \
            if dask is None else _on_dask(dask, model, group_bytes or DEFAULT_GROUP_BYTES, store)
        if output != STDOUT:
            with writing_to(output, "the manifest"):
                write_tensor_manifest(built, output, replace=force, inputs=inputs)
        return ManifestWritten(output=output, manifest=built)

    # --report names neither a file the run reads nor the manifest it writes: refused before any read.
    report_inputs = [*model_inputs(model, store), *([output] if output != STDOUT else [])] if rendering.to_file else []
    check_report_file(rendering, report_inputs)
    for report in rendering.files:
        if output != STDOUT and same_file(report, output):
            raise UsageError(report, "is the manifest this run writes (-o); a report never replaces it")
    with run_progress("manifest", [model], rendering) as bar:

        def made(name: str) -> ManifestWritten | ScanReport:
            with bar.item() as progress:
                return make(name, progress)

        outcomes = run_models([model], made)
    raise SystemExit(emit_outcomes(outcomes, rendering, inputs=report_inputs))


def _on_dask(address: str, model: str, group_bytes: int, store: str | None) -> TensorManifest:
    from ..fleet import connect, manifest_on

    with connect(address) as client:
        outcome = manifest_on(client, [model], group_bytes=group_bytes, store=store)[0]
    if outcome.error is not None:
        raise outcome.error
    assert outcome.result is not None
    return outcome.result


def _damage(models: list[Model]) -> ScanReport | None:
    """The first of ``models``' scans holding NaN, Inf or structure findings (said on stderr), or None."""
    from ..kinds import family
    from ..scan.run import scan

    for opened in models:
        scanned = scan(opened, workers=0)
        if any(family(d.kind) in REFUSED for d in scanned.diagnostics()):
            hint(f"ggaudit: {escape_path(opened.source)}: no manifest written (--require-clean): the scan "
                 "found what a good file never holds")
            return scanned
    return None


def _as_text(rendering: Rendering, name: str) -> Rendering:
    """``rendering`` with each destination of the format ``name`` (the manifest's, given as --format) in text."""
    def text(fmt: str) -> str:
        return "text" if fmt == name else fmt

    return dataclasses.replace(rendering, fmt=text(rendering.fmt), also=tuple((text(f), p) for f, p in rendering.also))


def _refuse_report_name(output: str) -> None:
    """``-o`` is the manifest (JSON, or llama-gguf-hash's lines): a name ending as a report's (``x.xml``,
    ``x.sarif``, ``x.html``) is a report asked for in the wrong place, refused before anything is read."""
    fmt = format_of(output)
    if fmt not in (None, "json", "text"):
        raise UsageError(output, f"is the manifest this command writes, not a report, yet its name ends as a {fmt} "
                                 "report's: write reports with --report FILE", field="-o")
