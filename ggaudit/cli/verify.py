"""``ggaudit verify``: digests against the Ollama store, the Hugging Face cache and local-dir downloads,
LM Studio's and GPT4All's folders, checksum files, a sha256 given, a blob's own name, or a tensor manifest.
Exit 0 all good, 1 mismatches, 2 unreadable input."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from ..outcomes import run_models
from ..errors import GGAuditError, UsageError
from .common import PathParam, handle_errors, model_inputs
from .progress import file_size, run_progress
from .reporters import Rendering, check_report_file, emit_outcomes, format_options

if TYPE_CHECKING:
    from ..outcomes import Outcome
    from ..verify.options import VerifyOptions
    from ..verify.report import VerifyReport


@click.command()
@click.argument("targets", nargs=-1)
@click.option("--ollama", "ollama_name", metavar="NAME", help="Verify an Ollama model (same as ollama:NAME).")
@click.option("--store", type=PathParam(file_okay=False), help="Root of the store TARGET names: Ollama's "
              "(default: $OLLAMA_MODELS or the platform default), LM Studio's or GPT4All's models folder.")
@click.option("--sums", type=PathParam(dir_okay=False), help="Verify the files a sha256 checksum file names.")
@click.option("--ignore-missing", is_flag=True, help="With --sums: skip files that are absent (as sha256sum -c).")
@click.option("--base", type=PathParam(file_okay=False), metavar="DIR",
              help="With --sums: resolve names under DIR instead of the checksum file's folder.")
@click.option("--sha256", "sha256", metavar="HEX", help="Verify the one FILE given against this sha256.")
@click.option("--manifest", "manifest_file", type=PathParam(dir_okay=False),
              help="Verify TARGET against a manifest: ggaudit's tensor manifest (`ggaudit manifest`) or "
                   "llama.cpp's llama-gguf-hash lines, told apart by content.")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Verify this many TARGETs at once.")
@format_options
@click.option("--fail-fast", is_flag=True, help="Stop at the first mismatch.")
@click.option("--limit", type=click.IntRange(min=0), default=20, show_default=True,
              help="Mismatches listed per TARGET in the text report; 0 lists none (all are counted, and "
                   "--format json lists all).")
@click.option("--no-cache", is_flag=True, help="Do not fill the digest cache (every file is read either way).")
@click.option("--trust-cache", is_flag=True, help="Take a file's digest from the digest cache when its device, "
              "inode, size, mtime and ctime are unchanged, without reading it: damage below the filesystem "
              "(media, a lost write) keeps every stamp and is not seen. Each such file is reported as not read.")
@click.option("--quick", is_flag=True, help="Check sizes and names and take digests from the digest cache only "
              "(as --trust-cache): hash nothing, and count a file without a cached digest as unchecked.")
@click.option("--dask", "dask", metavar="ADDRESS|local[:N]",
              help="Verify each TARGET in a task on a Dask cluster (pip install 'ggaudit[dask]'), its workers "
                   "reading the files at the same paths; the digest cache is not used there.")
@handle_errors
def verify(targets: tuple[str, ...], ollama_name: str | None, store: str | None, sums: str | None,
           ignore_missing: bool, base: str | None, sha256: str | None, manifest_file: str | None, jobs: int,
           rendering: Rendering, fail_fast: bool, limit: int, no_cache: bool, trust_cache: bool, quick: bool,
           dask: str | None) -> None:
    """Check the bytes of each TARGET against the digests they should have.

    \b
    TARGET is one of:
      ollama:NAME              every layer and the config of an Ollama model
      ollama:*                 every model of the store, one report each, then the blobs no
                               manifest names (orphans)
      hf:ORG/NAME[@REV]        a Hugging Face cache snapshot, offline
      hf-local:DIR             a huggingface-cli download --local-dir DIR, by its metadata
      lmstudio:[PUB/MODEL]     LM Studio's models (all, or one): each GGUF opens, split sets complete
      gpt4all:[FILE]           GPT4All's models (all, or one): size and md5 from its models3.json, else
                               as LM Studio
      FILE                     a blob named by its sha256 (sha256-<hex>), with --sha256 HEX any file,
                               or with --manifest a model
    Several TARGETs are reported one after the other; a failure in one does not lose the others.

    Exit 0 all good, 1 mismatches (an orphan blob included), 2 unreadable input. A file the
    expectations say should exist (an Ollama layer, a shard, a sums entry, TARGET itself with
    --manifest or as a blob) and that is absent is a "missing" mismatch: exit 1.

    Every byte is read. Whole-file digests are kept in a cache (ggaudit's folder in the user's cache
    folder, or $GGAUDIT_CACHE_DIR; used only if private to the user); --no-cache keeps none. With
    --trust-cache a file unchanged since (device, inode, size, mtime, ctime) is not read again, and is
    reported as "digest from the cache of DATE, not read again". --quick hashes nothing: a file the cache
    has no digest for is left unchecked (a warning, counted in the summary), and exit 0 says nothing
    wrong was found.
    """
    # Imported here, not above: `ggaudit verify --help` loads none of the checks.
    from ..verify.dispatch import verify as check
    from ..verify.options import VerifyOptions

    if quick and no_cache:
        raise UsageError(None, "--quick takes its digests from the cache: not with --no-cache")
    if trust_cache and no_cache:
        raise UsageError(None, "--trust-cache takes digests from the cache: not with --no-cache")
    if trust_cache and dask is not None:
        raise UsageError(None, "--dask workers use no digest cache: not with --trust-cache")
    rendering = dataclasses.replace(rendering, limit=limit)
    # One options object for every target: checked once, before any is read.
    options = VerifyOptions(manifest=manifest_file, sums=sums, store=store, fail_fast=fail_fast, sha256=sha256,
                            ignore_missing=ignore_missing, base=base, cache=not no_cache, trust_cache=trust_cache,
                            quick=quick)
    items = list(targets) + ([f"ollama:{ollama_name}"] if ollama_name is not None else [])
    audits: dict[str, Callable[..., VerifyReport]]
    if sums is None and (ignore_missing or base is not None):
        raise UsageError(None, "--ignore-missing and --base are for --sums FILE")
    if dask is not None and (sums is not None or sha256 is not None):
        raise UsageError(None, "--dask verifies TARGETs (with --manifest or by their store): not --sums or --sha256")
    if sums is not None:
        if items or manifest_file is not None or sha256 is not None:
            raise UsageError(None, "--sums FILE takes no TARGET, no --manifest and no --sha256")
        names, audits = [sums], {sums: functools.partial(check, options=options)}
    elif not items:
        raise UsageError(None, "give a TARGET, --ollama NAME or --sums FILE")
    elif sha256 is not None:
        if len(items) != 1 or manifest_file is not None:
            raise UsageError(None, "--sha256 HEX checks one FILE and takes no --manifest")
        names, audits = items, {items[0]: functools.partial(check, items[0], options=options)}
    elif dask is not None:
        if jobs > 1 or quick or any(_every_model(item, store) for item in items):
            raise UsageError(None, "--dask verifies each TARGET in a task: not with --jobs, --quick or ollama:*")
        names, audits = items, {}
    else:
        # Keyed by the target's text: a target given twice is the same check, reported twice.
        names, audits = _audits(items, options)
    # -o FILE is refused before anything is hashed when it is a file this run reads.
    inputs = _inputs(items, store, manifest_file, sums, base) if rendering.to_file else []
    check_report_file(rendering, inputs)
    if dask is not None:
        # A worker's cache folder may not be shared or kept: the workers use none.
        outcomes = _on_dask(dask, items, dataclasses.replace(options, cache=False))
    else:
        # One line for the run: a target that is a file counts its size until it starts (a store, nothing).
        estimates = [None if sums is not None else file_size(name) for name in names]
        with run_progress("verify", names, rendering, estimates=estimates) as bar:

            def one(target: str) -> VerifyReport:
                with bar.item() as progress:
                    return audits[target](progress=progress)

            outcomes = run_models(names, one, jobs=jobs)
    raise SystemExit(emit_outcomes(outcomes, rendering, inputs=[*inputs, *_files_read(outcomes)]))


def _inputs(items: list[str], store: str | None, manifest_file: str | None, sums: str | None,
            base: str | None) -> list[str]:
    """The files a verify of ``items`` (or of ``--sums``) reads, as far as they are known before it hashes
    any: the manifest or checksum file and the files it names, each target's files (an Ollama model's
    manifest and every blob it names, a snapshot's links and blobs, a store folder's files, a model's
    shards). Only names and small description files are read here; what fails to resolve is left for the
    run to report, and the files it then reads are checked again before the report is written."""
    from ..stores.sums import read_sums

    found = [path for path in (manifest_file, sums) if path is not None]
    if sums is not None:
        with contextlib.suppress(GGAuditError, OSError):
            found.extend(os.fspath(e.path) for e in read_sums(sums, base))
    for item in items:
        if manifest_file is not None:
            found.extend(model_inputs(item, store))
        else:
            found.append(item)
            with contextlib.suppress(GGAuditError, OSError):
                found.extend(_store_files(item, store))
    return found


def _store_files(target: str, store: str | None) -> list[str]:
    """The files of the store a TARGET depends on, those verify reads among them (none for a FILE): listed,
    not read."""
    from ..stores.registry import Roots, find_store

    found = find_store(target, Roots(store), field="target")
    return [] if found is None else found.relied_on()


def _files_read(outcomes: list[Outcome[VerifyReport]]) -> list[str]:
    """Every file the reports name (checked, or with a mismatch): what the run read, however it found it."""
    return [path for o in outcomes if o.result is not None
            for path in [*(c.path for c in o.result.checked), *(m.path for m in o.result.mismatches)]]


def _on_dask(address: str, targets: list[str], options: VerifyOptions) -> list[Outcome[VerifyReport]]:
    from ..fleet import connect, verify_on

    with connect(address) as client:
        return verify_on(client, targets, options=options)


def _every_model(target: str, store: str | None) -> bool:
    """Whether ``target`` names every model of its store (``ollama:*``)."""
    from ..stores.registry import Roots, every_model_store

    return every_model_store(target, Roots(store)) is not None


def _audits(items: list[str], options: VerifyOptions) -> tuple[list[str], dict[str, Callable[..., VerifyReport]]]:
    """The targets, in order, and each one's check (called with ``progress=``); a name standing for every
    model of its store (``ollama:*``, without --manifest) becomes one target per model, then the store
    itself (for Ollama's: its orphan blobs and stray partial downloads)."""
    from ..stores.registry import Roots, every_model_store
    from ..verify.dispatch import verify as check
    from ..verify.dispatch import verify_part

    targets: list[str] = []
    audits: dict[str, Callable[..., VerifyReport]] = {}
    for item in items:
        every = None if options.manifest is not None else every_model_store(item, Roots(options.store))
        if every is None:
            targets.append(item)
            audits[item] = functools.partial(check, item, options=options)
            continue
        for part in every.each_model():
            targets.append(part.label)
            audits[part.label] = functools.partial(verify_part, part, options=options)
    return targets, audits
