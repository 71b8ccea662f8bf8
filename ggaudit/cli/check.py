"""``ggaudit check``: every byte of each TARGET through every read path, and the verdict in words. Exit 0
nothing wrong, 1 anything wrong, 2 unreadable input."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import click

from ..outcomes import run_models
from ..evidence.paths import MODES, Mode
from .common import STORE_HELP, PathParam, handle_errors, model_inputs
from .progress import file_size, run_progress
from .reporters import Rendering, check_report_file, emit_outcomes, format_options

if TYPE_CHECKING:
    from ..outcomes import Outcome
    from ..check.options import CheckOptions
    from ..check.report import CheckReport



@click.command()
@click.argument("targets", metavar="TARGET...", nargs=-1, required=True)
@click.option("--manifest", "manifest_file", type=PathParam(dir_okay=False),
              help="ggaudit's tensor manifest of the model (`ggaudit manifest`, made where it works): decides "
                   "which bytes are right when nothing is published, and names the tensors and rows that differ.")
@click.option("--sums", type=PathParam(dir_okay=False), help="A sha256 checksum file naming TARGET's file(s).")
@click.option("--sha256", "sha256", metavar="HEX", help="The sha256 TARGET's one file should have.")
@click.option("--store", type=PathParam(file_okay=False), help=STORE_HELP)
@click.option("--modes", default=",".join(MODES), show_default=True, metavar="LIST",
              help="Read paths to compare, comma-separated: buffered, mmap, direct.")
@click.option("--anomalies", is_flag=True, help="Also report block scales far outside what their tensor predicts.")
@click.option("--no-evict", "no_evict", is_flag=True,
              help="Never evict the file's pages to tell a device holding other bytes than the page cache from "
                   "direct reads that are wrong (then both explanations are said).")
@click.option("--dask", "dask", metavar="ADDRESS|local[:N]",
              help="Check on a Dask cluster (pip install 'ggaudit[dask]'), a task per file and read path: a "
                   "scheduler's address, its workers reading TARGETs at the same paths, or local[:N] worker "
                   "processes here.")
@format_options
@handle_errors
def check(targets: tuple[str, ...], manifest_file: str | None, sums: str | None, sha256: str | None,
          store: str | None, modes: str, anomalies: bool, no_evict: bool, dask: str | None,
          rendering: Rendering) -> None:
    """Read every byte of each TARGET through every read path and say whether it is intact.

    Is it the file, the download, or the way this machine reads it? Each file is read once per read
    path (buffered reads, a memory mapping as Ollama and llama.cpp read, direct I/O); the bytes are
    judged by the digest its store publishes (Ollama, Hugging Face, GPT4All), --sums, --sha256 or
    --manifest, else by agreement of the page cache with the device. The first line is the verdict.

    TARGET is a GGUF file (any shard of a split set), or a store's name: ollama:NAME, hf:ORG/NAME,
    hf-local:DIR, lmstudio:PUBLISHER/MODEL, gpt4all:FILE.

    Exit 0 nothing wrong (intact, or nothing published and every path agrees), 1 anything wrong
    (damaged, NaN or Inf stored, bytes no tensor owns, a read path that delivers other bytes), 2 bad
    input or unreadable.
    """
    # Imported here, not above: `ggaudit check --help` loads none of the job.
    from ..check.options import CheckOptions
    from ..check.run import check as check_target
    from ..stores.locate import distinct_models

    # The names as typed (cast): CheckOptions refuses one that is no read path, naming it.
    named = cast("tuple[Mode, ...]", tuple(m.strip() for m in modes.split(",") if m.strip()))
    options = CheckOptions(manifest=manifest_file, sums=sums, sha256=sha256, store=store, modes=named,
                           anomalies=anomalies, evict=not no_evict)
    inputs = ([p for t in targets for p in model_inputs(t, store)] +
              [p for p in (manifest_file, sums) if p is not None]) if rendering.to_file else []
    check_report_file(rendering, inputs)
    names = distinct_models(list(targets))     # a split set's shards, each named: one model
    if dask is not None:
        raise SystemExit(emit_outcomes(_on_dask(dask, names, options), rendering, inputs=inputs))
    # One line for the run, counting every byte of every path; a model not started yet counts its file's size
    # once per path (a store's name: unknown until it starts).
    estimates = [None if (size := file_size(t)) is None else size * len(options.modes) for t in names]
    with run_progress("check", names, rendering, estimates=estimates) as bar:

        def one(target: str) -> CheckReport:
            with bar.item() as progress:
                return check_target(target, options=options, progress=progress)

        outcomes = run_models(names, one)
    raise SystemExit(emit_outcomes(outcomes, rendering, inputs=inputs))


def _on_dask(address: str, targets: list[str], options: CheckOptions) -> list[Outcome[CheckReport]]:
    from ..fleet import check_on, connect, on_fleet

    on_fleet(options)       # refused before a cluster is started or reached
    with connect(address) as client:
        return check_on(client, targets, options=options)
