"""``ggaudit verify``: digests against the Ollama store, the Hugging Face cache, checksum files, a
blob's own name, or a tensor manifest. Exit 0 all good, 1 mismatches, 2 unreadable input."""

from __future__ import annotations

import click

from ..batch import run_models
from ..errors import UsageError
from ..format.locate import OLLAMA_PREFIX
from ..text import escape
from ..verify.dispatch import verify as check
from .common import PathParam, handle_errors, hint
from .reporters import emit_outcomes, format_options


@click.command()
@click.argument("targets", nargs=-1)
@click.option("--ollama", "ollama_name", metavar="NAME", help="Verify an Ollama model (same as ollama:NAME).")
@click.option("--store", type=PathParam(file_okay=False), help="Ollama store root (default: $OLLAMA_MODELS "
              "or the platform default).")
@click.option("--sums", type=PathParam(dir_okay=False), help="Verify the files a sha256 checksum file names.")
@click.option("--manifest", "manifest_file", type=PathParam(dir_okay=False),
              help="Verify TARGET against a tensor manifest written by `ggaudit manifest`.")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Verify this many TARGETs at once.")
@format_options
@click.option("--fail-fast", is_flag=True, help="Stop at the first mismatch.")
@handle_errors
def verify(targets: tuple[str, ...], ollama_name: str | None, store: str | None, sums: str | None,
           manifest_file: str | None, jobs: int, fmt: str, fail_fast: bool) -> None:
    """Check the bytes of each TARGET against the digests they should have.

    \b
    TARGET is one of:
      ollama:NAME        every layer and the config of an Ollama model
      hf:ORG/NAME[@REV]  a Hugging Face cache snapshot, offline
      FILE               a blob named by its sha256 (sha256-<hex>), or with --manifest a model
    Several TARGETs are reported one after the other; a failure in one does not lose the others.

    Exit 0 all good, 1 mismatches, 2 unreadable input. A file the expectations say should exist
    (an Ollama layer, a shard, a sums entry, TARGET itself with --manifest or as a blob) and that is
    absent is a "missing" mismatch: exit 1.
    """
    items = list(targets) + ([OLLAMA_PREFIX + ollama_name] if ollama_name is not None else [])
    if sums is not None:
        if items or manifest_file is not None:
            raise UsageError(None, "--sums FILE takes no TARGET and no --manifest")
        outcomes = run_models([sums], lambda path: check(sums=path, fail_fast=fail_fast))
    elif not items:
        raise UsageError(None, "give a TARGET, --ollama NAME or --sums FILE")
    else:
        outcomes = run_models(items, lambda t: check(t, manifest=manifest_file, store=store, fail_fast=fail_fast),
                              jobs=jobs)
    for outcome in outcomes:
        for warning in outcome.result.warnings if outcome.result is not None else ():
            hint(f"ggaudit: warning: {escape(warning)}")
    raise SystemExit(emit_outcomes(outcomes, fmt))
