"""``ggaudit manifest``: write a tensor manifest (file sha256, per-tensor and per-row-group xxh3-128), or
llama.cpp's ``llama-gguf-hash`` lines."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

import click

from ..errors import GGAuditError, UsageError
from ..escaping import escape_path
from ..format.layout import Model, open_model
from ..io.fan_out import Progress
from ..io.output_files import STDOUT, check_output
from ..outcomes import run_models
from ..stores.locate import description_files, resolve_model
from ..stores.registry import Roots, find_store
from ..verify.manifests.llama_hash import DEFAULT_TYPES, FORMAT as LLAMA_HASH
from ..verify.manifests.llama_hash import HASH_TYPES, build_llama_hash, hash_types, write_llama_hash
from ..verify.manifests.report import ManifestWritten
from ..verify.manifests.tensor import DEFAULT_GROUP_BYTES, TensorManifest, build_tensor_manifest, write_tensor_manifest
from .common import STORE_HELP, PathParam, handle_errors, hint, model_inputs, writing_to
from .progress import run_progress
from .reporters import Rendering, check_report_file, emit_outcomes, format_of, format_options_also, same_file

if TYPE_CHECKING:
    from distributed import Client

    from ..scan.report import ScanReport

#: ``--manifest-format`` of ggaudit's own JSON tensor manifest.
GGAUDIT = "ggaudit"
#: The finding families (ggaudit.kinds) for which --require-clean writes no manifest.
REFUSED = ("nonfinite", "structure")
#: What ``-o`` holds, with several MODELs, to name each model's manifest.
NAME = "{name}"
_SHARD_NUMBER = re.compile(r"-\d{5}-of-\d{5}$")
_UNSAFE = re.compile(r"[^\w.-]+")


@click.command()
@click.argument("models", metavar="MODEL...", nargs=-1, required=True)
@click.option("-o", "--output", required=True, type=PathParam(dir_okay=False), metavar="FILE",
              help="Manifest file to write ('-' for stdout). Never one of MODEL's files. With several MODELs, a "
                   f"name holding {NAME}, which becomes each model's name: -o 'manifests/{NAME}.json'.")
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
def manifest(models: tuple[str, ...], output: str, force: bool, manifest_format: str, hashes: str | None,
             group_bytes: int | None, store: str | None, dask: str | None, require_clean: bool,
             rendering: Rendering) -> None:
    """Write MODEL's tensor manifest to OUTPUT, reading each file once.

    MODEL is a GGUF file, any shard of a split set, or ollama:NAME (its model layer and, if it has one,
    its projector). OUTPUT '-' prints the manifest on stdout (with --json, inside the JSON every command
    prints); an existing OUTPUT is replaced only with --force, atomically, and never when it is one of
    MODEL's files or a file of the store MODEL is in.

    Several MODELs (a split set's shards are one model) write a manifest each: OUTPUT holds {name}, which
    becomes the model's name (its file's name without .gguf and shard number; for a store's name, the name
    after the prefix; any character but a letter, digit, '.', '_' or '-' made '-'). A model that cannot be
    read, or that --require-clean refuses, does not stop the others. Exit 0 every manifest written, 1 some
    model refused by --require-clean, 2 a model unreadable (or a bad command line).

    --manifest-format llama-gguf-hash writes llama.cpp's format instead (one line per hash, a block per
    file, named as MODEL's files are given here), which llama-gguf-hash --check reads too; --format
    llama-gguf-hash says the same. (Otherwise --format chooses how this command's result is printed,
    text or json, as for every command.)

    Check it later with `ggaudit verify MODEL --manifest OUTPUT`, which reads either format.
    """
    from ..stores.locate import distinct_models

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
    targets = distinct_models(list(dict.fromkeys(models)))     # a split set once, however many shards are named
    outputs = manifest_outputs(output, targets)
    # Every model's files (and its store's), known before any is read: no manifest replaces another model's.
    run_inputs = [p for t in targets for p in model_inputs(t, store)]

    def make(target: str, progress: Progress | None, client: Client | None) -> ManifestWritten | ScanReport:
        out = outputs[target]
        opened = [open_model(path) for path in resolve_model(target, store=store)]
        inputs = [f.path for m in opened for f in m.files] + description_files(target, store=store) + run_inputs
        if out != STDOUT:
            check_output(out, replace=force, inputs=inputs, replace_with="--force")   # before the reads
        damaged = _damage(opened) if require_clean else None
        if damaged is not None:
            return damaged      # its findings are the model's result (exit 1), and no manifest blesses them
        if llama:
            built_lines = build_llama_hash(opened, types, progress=progress)
            if out != STDOUT:
                with writing_to(out, "the manifest"):
                    write_llama_hash(built_lines, out, replace=force, inputs=inputs)
            return ManifestWritten(output=out, manifest=built_lines)
        built = build_tensor_manifest(opened, group_bytes=group_bytes or DEFAULT_GROUP_BYTES, progress=progress) \
            if client is None else _on_dask(client, target, group_bytes or DEFAULT_GROUP_BYTES, store)
        if out != STDOUT:
            with writing_to(out, "the manifest"):
                write_tensor_manifest(built, out, replace=force, inputs=inputs)
        return ManifestWritten(output=out, manifest=built)

    # --report names neither a file the run reads nor a manifest it writes: refused before any read.
    written = [out for out in outputs.values() if out != STDOUT]
    report_inputs = [*run_inputs, *written] if rendering.to_file else []
    check_report_file(rendering, report_inputs)
    for report in rendering.files:
        if any(same_file(report, out) for out in written):
            raise UsageError(report, "is the manifest this run writes (-o); a report never replaces it")
    with _cluster(dask) as client, run_progress("manifest", targets, rendering) as bar:

        def made(target: str) -> ManifestWritten | ScanReport:
            with bar.item() as progress:
                return make(target, progress, client)

        outcomes = run_models(targets, made)
    raise SystemExit(emit_outcomes(outcomes, rendering, inputs=report_inputs))


def manifest_outputs(output: str, targets: list[str]) -> dict[str, str]:
    """The manifest file of each target: ``output`` itself for one (``{name}`` in it made the model's name);
    for several, ``output`` must hold ``{name}`` and the names must tell the files apart (UsageErrors, said
    before anything is read)."""
    if NAME not in output:
        if len(targets) > 1:
            raise UsageError(None, f"{len(targets)} models make {len(targets)} manifests: give -o a name holding "
                                   f"{NAME}, which becomes each model's name (-o 'manifests/{NAME}.json')",
                             field="-o")
        return {targets[0]: output}
    outputs = {target: output.replace(NAME, model_name(target)) for target in targets}
    claimed: dict[str, str] = {}
    for target, out in outputs.items():
        first = claimed.setdefault(os.path.normcase(os.path.abspath(out)), target)
        if first != target:
            raise UsageError(out, f"would be the manifest of both {escape_path(first)} and {escape_path(target)} "
                                  f"(both named {model_name(target)}): make their manifests in separate runs",
                             field="-o")
    return outputs


def model_name(target: str) -> str:
    """What ``{name}`` in ``-o`` becomes for ``target``: a file's name without ``.gguf`` and a split set's
    shard number (``m-00001-of-00003.gguf`` is ``m``); a store's name after its prefix (``ollama:gemma3:4b``
    is ``gemma3-4b``); every run of characters but letters, digits, ``.``, ``_`` and ``-`` made one ``-``, and
    no leading or trailing dot or ``-``, so it is one file name in the folder ``-o`` gives, never a way out."""
    try:
        found = find_store(target, Roots())
    except GGAuditError:        # no store's name: the run says what is wrong with it
        found = None
    text = os.path.basename(target) if found is None else found.name
    text = _SHARD_NUMBER.sub("", re.sub(r"\.gguf$", "", text, flags=re.IGNORECASE))
    safe = _UNSAFE.sub("-", text).strip(".-")
    return safe or (found.prefix.removesuffix(":") if found is not None else "model")


@contextlib.contextmanager
def _cluster(dask: str | None) -> Iterator[Client | None]:
    """The Dask client of ``--dask`` for the whole run (a local cluster is started once), or None."""
    if dask is None:
        yield None
        return
    from ..fleet import connect

    with connect(dask) as client:
        yield client


def _on_dask(client: Client, model: str, group_bytes: int, store: str | None) -> TensorManifest:
    from ..fleet import manifest_on

    outcome = manifest_on(client, [model], group_bytes=group_bytes, store=store)[0]
    if outcome.error is not None:
        raise outcome.error
    assert outcome.result is not None
    return outcome.result


def _damage(models: list[Model]) -> ScanReport | None:
    """The first of ``models``' scans holding NaN, Inf or structure findings, its first such finding said on
    stderr (where, what was expected and found), or None."""
    from ..kinds import family
    from ..scan.run import scan

    for opened in models:
        scanned = scan(opened, workers=0)
        blocking = [d for d in scanned.diagnostics() if family(d.kind) in REFUSED]
        if blocking:
            # A tensor's findings beyond the scan's --limit are counted, not listed: each is a NaN or an Inf.
            count = len(blocking) + sum(t.total - len(t.findings) for t in scanned.tensors)
            hint(f"ggaudit: {escape_path(opened.source)}: no manifest written (--require-clean): the scan found what "
                 f"a good file never holds: {blocking[0].lines[0]}" + (f" (the first of {count})" if count > 1 else ""))
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
