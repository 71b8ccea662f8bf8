"""`ggaudit rows`: replay table rows through buffered, mmap and direct reads and compare with the file."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import click

from ..outcomes import run_models
from ..errors import NothingChecked, UsageError
from ..evidence.paths import Mode
from ..rows import MODES, WHOLE_FILE
from .common import STORE_HELP, PathParam, handle_errors, model_inputs
from .progress import BYTES, ROWS, RunProgress, run_progress
from .reporters import Rendering, check_report_file, emit_outcomes, format_options

if TYPE_CHECKING:
    from ..io.fan_out import Progress
    from ..rows.replay import ReadPathProgress, RowsReport


def _two_names(text: str | None) -> tuple[str, str] | None:
    """--capture-arrays IDS,ROWS as the pair of names RowsOptions takes."""
    if text is None:
        return None
    names = tuple(n.strip() for n in text.split(","))
    if len(names) != 2 or not all(names):
        raise UsageError("--capture-arrays", "must name the IDs and the rows arrays, as IDS,ROWS")
    return names[0], names[1]


def _modes(given: tuple[str, ...]) -> tuple[Mode, ...] | None:
    """Every --modes given, joined (each once, in order); None when there was none. The names as typed (cast):
    check_rows refuses one that is no read path, naming it."""
    if not given:
        return None
    modes = tuple(dict.fromkeys(m.strip() for text in given for m in text.split(",") if m.strip()))
    if not modes:
        raise UsageError(None, "--modes needs at least one of " + ",".join(MODES))
    return cast("tuple[Mode, ...]", modes)


def _check_choice(ids: tuple[str, ...], ids_files: tuple[str, ...], all_rows: bool, random_n: int | None,
                  page_crossing: bool, against: str | None) -> None:
    """Refuse, in the command line's words, a choice of rows that is none or too many."""
    chosen = [flag for flag, on in (("--ids", bool(ids)), ("--ids-file", bool(ids_files)),
                                    ("--random", random_n is not None), ("--page-crossing", page_crossing)) if on]
    if all_rows and chosen:
        raise UsageError(None, f"--all sweeps the whole table; drop {', '.join(chosen)}")
    if not all_rows and not chosen and against is None:
        raise UsageError(None, "choose rows: --ids, --ids-file, --random N, --page-crossing or --all")


@click.command()
@click.argument("model", type=PathParam(dir_okay=False))
@click.option("--tensor", metavar="NAME",
              help="Table to replay [default: per_layer_token_embd.weight, else token_embd.weight].")
@click.option("--ids", multiple=True, metavar="LIST",
              help='Row IDs and ranges, e.g. "4162,4170-4200" (repeatable; all are joined).')
@click.option("--ids-file", "ids_files", multiple=True, type=PathParam(dir_okay=False),
              help="File of row IDs/ranges ('#' comments; one a line; a JSON list; repeatable).")
@click.option("--all", "all_rows", is_flag=True, help="Sweep the whole table in large sequential aligned reads.")
@click.option("--random", "random_n", type=int, metavar="N", help="Also pick N distinct random rows.")
@click.option("--seed", type=int, metavar="S", help="Seed for --random (printed when chosen for you).")
@click.option("--page-crossing", is_flag=True, help="Also select every row that crosses a 4096-byte page.")
@click.option("--modes", multiple=True, metavar="LIST",
              help=f"Read paths, comma-separated (repeatable) [default: {','.join(MODES)}; none with --against].")
@click.option("--workers", type=int, default=4, show_default=True, metavar="N",
              help="Threads gathering a batch (reads in flight for --all).")
@click.option("--batch", type=int, default=256, show_default=True, metavar="N", help="Rows per gather batch.")
@click.option("--cache-rows", type=int, default=0, show_default=True, metavar="N",
              help="Row-cache capacity; 0 turns the cache passes (miss, hit, eviction pressure) off.")
@click.option("--prefetch", is_flag=True,
              help="Also gather each batch while the previous one is still held in its read buffers, and "
                   "compare that one only then (buffers reused too early); holds two batches of buffers.")
@click.option("--against", type=PathParam(dir_okay=False), metavar="CAPTURE",
              help="Engine capture (.npz/.npy: ids + raw uint8 rows or float16/float32 decoded rows).")
@click.option("--capture-arrays", metavar="IDS,ROWS",
              help="The capture's IDs and rows arrays (or fields), when not `ids` and one other or told apart "
                   "by shape.")
@click.option("--manifest", type=PathParam(dir_okay=False), metavar="M",
              help="Tensor manifest (ggaudit manifest) whose row-group digests decide a mismatched row's right bytes.")
@click.option("--sha256", metavar="HEX",
              help="The file's published sha256, deciding rows the read paths dispute when nothing else does "
                   "[default: what the store publishes, or the blob's name].")
@click.option("--fp8", is_flag=True, help="The table is I8 holding FP8 E4M3 bytes (decode for finiteness).")
@click.option("--fail-fast", is_flag=True, help="Stop at the first mismatch.")
@click.option("--store", type=PathParam(file_okay=False), help=STORE_HELP)
@format_options
@handle_errors
def rows(model: str, tensor: str | None, ids: tuple[str, ...], ids_files: tuple[str, ...], all_rows: bool,
         random_n: int | None, seed: int | None, page_crossing: bool, modes: tuple[str, ...], workers: int, batch: int,
         cache_rows: int, prefetch: bool, against: str | None, capture_arrays: str | None, manifest: str | None,
         sha256: str | None, fp8: bool, fail_fast: bool,
         store: str | None, rendering: Rendering) -> None:
    """Replay rows of an embedding table through each read path and byte-compare them with the file."""
    # Imported here, not above: `ggaudit rows --help` loads neither numpy nor the readers.
    from ..stores.locate import open_model
    from ..stores.published_digest import given_sha256, published_digest
    from ..stores.registry import Roots
    from ..rows.replay import RowSelection, RowsOptions, check_rows, pick_tensor
    from .ids import given_ids

    chosen = _modes(modes)
    if chosen is None:
        chosen = () if against is not None else MODES
    # -o FILE is never a file this run reads: refused before it reads any.
    inputs = [*model_inputs(model, store), *ids_files, *(f for f in (against, manifest) if f is not None)] \
        if rendering.to_file else []
    check_report_file(rendering, inputs)
    with run_progress("rows", [model], rendering, unit=ROWS) as bar, bar.item() as tick:
        options = RowsOptions(workers=workers, batch=batch, cache_rows=cache_rows, prefetch=prefetch, fp8=fp8,
                              fail_fast=fail_fast, progress=None if tick is None else _by_read_path(bar, tick),
                              capture_arrays=_two_names(capture_arrays))

        def replay(_: str) -> RowsReport:
            opened = open_model(model, store=store)
            table = pick_tensor(opened, tensor)    # the model and the table are said wrong first
            n_rows = table.n_rows
            published = given_sha256(sha256, "--sha256") if sha256 is not None else \
                published_digest(model, table.path, Roots(store))
            _check_choice(ids, ids_files, all_rows, random_n, page_crossing, against)
            select = RowSelection(all_rows=all_rows, random=random_n, seed=seed, page_crossing=page_crossing)
            listed = None
            if ids or ids_files:
                # Repeated selectors add up, as repeated --tensor does elsewhere.
                listed, said = given_ids(ids, ids_files, n_rows)
                if not listed.size and random_n is None and not page_crossing:
                    raise NothingChecked(None, f"no rows selected by {' + '.join(said)}; nothing was checked")
            return check_rows(opened, listed, tensor=tensor, modes=chosen, options=options, select=select,
                              against=against, manifest=manifest, published=published)

        outcomes = run_models([model], replay)
    raise SystemExit(emit_outcomes(outcomes, rendering, inputs=inputs))


def _by_read_path(bar: RunProgress, tick: Progress) -> ReadPathProgress:
    """check_rows' progress (read path, rows done, rows in all) on the line: each pass over the rows (a
    read path, its prefetch stage) named, and counted from 0 with its own rate; a whole-file pass in bytes."""
    current = ("", 0)

    def told(mode: str, done: int, total: int) -> None:
        nonlocal current
        if mode != current[0] or done < current[1]:
            bar.stage(mode, BYTES if mode.endswith(WHOLE_FILE) else ROWS)
        current = (mode, done)
        tick(done, total)

    return told
