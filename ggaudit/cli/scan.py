"""``ggaudit scan``: NaN, Inf and outliers in every tensor, located exactly. Exit 0 clean, 1 findings,
2 unreadable input (of any model, when several are given)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import click

from ..outcomes import run_models
from ..errors import UsageError
from ..scan import FP8_E4M3
from .common import STORE_HELP, PathParam, expand_models, handle_errors, model_inputs
from .progress import file_size, run_progress
from .reporters import Rendering, check_report_file, emit_outcomes, format_options

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from ..outcomes import Outcome
    from ..scan.options import ScanOptions
    from ..scan.report import ScanReport


@click.command()
@click.argument("models", metavar="MODEL...", nargs=-1, required=True)
@click.option("--tensor", "tensors", multiple=True, metavar="GLOB",
              help="Scan only tensors whose name matches GLOB (repeatable).")
@click.option("--deep", is_flag=True, help="Also dequantize blocks with gguf.quants and check decoded values.")
@click.option("--max-abs", type=float, metavar="X", help="Report finite values or scales with |x| > X as outliers.")
@click.option("--anomalies", is_flag=True,
              help="Also report block scales far outside what their tensor's other scales predict (likely "
                   "flipped exponent bits; confirm with verify or diff).")
@click.option("--as", "overrides", multiple=True, metavar=f"NAME={FP8_E4M3}",
              help="Treat the I8 tensor NAME as FP8 E4M3 bytes (0x7F and 0xFF are NaN); repeatable.")
@click.option("--limit", type=click.IntRange(min=0), default=16, show_default=True,
              help="Findings listed per tensor (all are counted).")
@click.option("--fail-fast", is_flag=True, help="Stop at the first finding.")
@click.option("--store", type=PathParam(file_okay=False), help=STORE_HELP)
@click.option("--sha256", is_flag=True,
              help="Also print each file's sha256, computed from the same single read as the scan.")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True, help="Models scanned at once.")
@click.option("--workers", type=click.IntRange(min=0), metavar="N",
              help="Reader processes: 0 reads in this process [default: none below 256 MiB of tensor data or "
                   "with one core available, else 2; one pool for all MODELs].")
@click.option("--dask", "dask", metavar="ADDRESS|local[:N]",
              help="Scan on a Dask cluster (pip install 'ggaudit[dask]'): a scheduler's address, its workers "
                   "reading MODELs at the same paths, or local[:N] worker processes here.")
@format_options
@handle_errors
def scan(models: tuple[str, ...], tensors: tuple[str, ...], deep: bool, max_abs: float | None, anomalies: bool,
         overrides: tuple[str, ...], limit: int, fail_fast: bool, store: str | None, sha256: bool, jobs: int,
         workers: int | None, dask: str | None, rendering: Rendering) -> None:
    """Find NaN and Inf (and with --max-abs, outliers) in each MODEL's tensors.

    With --anomalies, also block scales far outside what their tensor's other scales predict: likely
    flipped exponent bits (finite damage no digest is needed to see).

    MODEL is a GGUF file, any shard of a split set, or ollama:NAME (its model blob, then its
    projector's if it has one). Several MODELs are reported one after the other; a failure in one does
    not lose the others.
    """
    # Imported here, not above: `ggaudit scan --help` loads neither numpy nor the scanner.
    from ..stores.locate import resolve_model
    from ..scan.options import ScanOptions
    from ..scan.run import scan as scan_model

    if jobs > 1 and workers:
        # Forking reader processes from several job threads at once is unsafe: jobs read in-process.
        raise UsageError(None, "--jobs N reads each model in its own thread: not with --workers")
    if dask is not None and (workers is not None or jobs > 1):
        raise UsageError(None, "--dask reads on the cluster's workers: not with --workers or --jobs")
    inputs = [p for m in models for p in model_inputs(m, store)] if rendering.to_file else []
    check_report_file(rendering, inputs)
    paths = expand_models(models, store)
    # One options object for every model (and every worker of a cluster): checked once, before any is read.
    options = ScanOptions(tensors=tensors or None, deep=deep, max_abs=max_abs, as_fp8=_fp8_names(paths[0], overrides),
                          limit=limit, fail_fast=fail_fast, workers=workers if jobs == 1 else 0,
                          hashes=("sha256",) if sha256 else (), histograms="html" in rendering.formats,
                          anomalies=anomalies)
    if dask is not None:
        raise SystemExit(emit_outcomes(_on_dask(dask, paths, options, store), rendering, inputs=inputs))
    # One line for the run: the models not started yet count their file's size.
    with run_progress("scan", paths, rendering, estimates=[file_size(p) for p in paths]) as bar:

        def one(model: str) -> ScanReport:
            with bar.item() as progress:
                path = resolve_model(model, store=store)[0]  # re-raises what expand_models kept back
                return scan_model(path, options=options, progress=progress)

        with _shared_pool(paths, options):
            outcomes = run_models(paths, one, jobs=jobs)
    raise SystemExit(emit_outcomes(outcomes, rendering, inputs=inputs))


def _shared_pool(paths: list[str], options: ScanOptions) -> AbstractContextManager[None]:
    """One pool of reader processes for the run's scans when several models may read in them; for one
    model there is nothing to share, and without workers no pool (nor multiprocessing) is loaded."""
    if len(paths) < 2 or options.workers == 0:
        return contextlib.nullcontext()
    from ..scan.workers import reader_pool

    return reader_pool()


def _on_dask(address: str, paths: list[str], options: ScanOptions, store: str | None) -> list[Outcome[ScanReport]]:
    from ..fleet import connect, on_fleet, scan_on

    on_fleet(options)       # refused before a cluster is started or reached
    with connect(address) as client:
        return scan_on(client, paths, options=options, store=store)


def _fp8_names(path: str, overrides: tuple[str, ...]) -> list[str]:
    names = []
    for item in overrides:
        name, sep, encoding = item.rpartition("=")
        if not sep or not name or encoding != FP8_E4M3:
            raise UsageError(path, f"--as takes NAME={FP8_E4M3}, not {item!r}", field="--as")
        names.append(name)
    return names
