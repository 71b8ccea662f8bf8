"""`ggaudit rows`: replay table rows through buffered, mmap and direct reads and compare with the file."""

from __future__ import annotations

import click

from ..errors import UsageError
from ..rows.readers import MODES
from ..scan.report import CAUSE_OVERFLOW
from ..rows.replay import Geometry, Mismatch, RowsReport, ShortRead, check_rows
from ..text import escape, escape_path
from .common import EXIT_CLEAN, EXIT_FINDINGS, PathParam, emit_json, fail, handle_errors, stderr_is_tty


def _modes(given: tuple[str, ...]) -> tuple[str, ...] | None:
    """Every --modes given, joined (each once, in order); None when there was none."""
    if not given:
        return None
    modes = tuple(dict.fromkeys(m.strip() for text in given for m in text.split(",") if m.strip()))
    if not modes:
        raise UsageError(None, "--modes needs at least one of " + ",".join(MODES))
    return modes


@click.command()
@click.argument("model", type=PathParam(dir_okay=False))
@click.option("--tensor", metavar="NAME",
              help="Table to replay [default: per_layer_token_embd.weight, else token_embd.weight].")
@click.option("--ids", multiple=True, metavar="LIST",
              help='Row IDs and ranges, e.g. "4162,4170-4200" (repeatable; all are joined).')
@click.option("--ids-file", "ids_files", multiple=True, type=PathParam(dir_okay=False),
              help="File of row IDs/ranges ('#' comments; repeatable).")
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
@click.option("--fp8", is_flag=True, help="The table is I8 holding FP8 E4M3 bytes (decode for finiteness).")
@click.option("--fail-fast", is_flag=True, help="Stop at the first mismatch.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@handle_errors
def rows(model: str, tensor: str | None, ids: tuple[str, ...], ids_files: tuple[str, ...], all_rows: bool,
         random_n: int | None, seed: int | None, page_crossing: bool, modes: tuple[str, ...], workers: int, batch: int,
         cache_rows: int, prefetch: bool, against: str | None, fp8: bool, fail_fast: bool, as_json: bool) -> None:
    """Replay rows of an embedding table through each read path and byte-compare them with the file."""
    chosen = _modes(modes)
    if chosen is None:
        chosen = () if against is not None else MODES
    # Repeated selectors add up, as repeated --tensor does elsewhere.
    report = check_rows(model, tensor=tensor, ids=",".join(ids) if ids else None, ids_file=ids_files or None,
                        all_rows=all_rows, random=random_n,
                        seed=seed, page_crossing=page_crossing, modes=chosen, workers=workers, batch=batch,
                        cache_rows=cache_rows, prefetch=prefetch, against=against, fp8=fp8, fail_fast=fail_fast,
                        progress=_progress if stderr_is_tty() else None)
    if stderr_is_tty():
        click.echo("\r\x1b[K", err=True, nl=False)
    if as_json:
        emit_json(report.to_dict())
    else:
        for line in render(report):
            click.echo(line)
    if not report.compared and report.clean:
        fail("nothing was compared: every read path was skipped (see the warnings)")
    raise SystemExit(EXIT_CLEAN if report.clean else EXIT_FINDINGS)


def _progress(path: str, done: int, total: int) -> None:
    click.echo(f"\r{path}: {done}/{total} rows ({100 * done // max(total, 1)}%)", err=True, nl=False)


def _yes(value: bool | None) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


def _count(n: int, unit: str) -> str:
    return f"{n} {unit} differ" if n != 1 else f"1 {unit.rstrip('s')} differs"


def _geometry(g: Geometry) -> str:
    return f"4096-byte page {g.page}, 512-byte sector {g.sector}, 64 KiB {g.window_64k}"


def render_mismatch(m: Mismatch) -> list[str]:
    """A mismatch the way fio reports a verify failure: where, then expected before actual."""
    other = f" (row {m.other_row})" if m.other_row is not None else ""
    lines = [
        f"mismatch: {m.path} row {m.row} [{m.kind}{other}] ({m.stage})",
        f"  file {escape_path(m.file)}, offset {m.row_offset} (0x{m.row_offset:x}), length {m.length}",
        f"  tensor {escape(m.tensor)}, row {m.row}, block {m.block}, column {m.column} "
        f"(byte {m.byte} of the row, offset {m.offset} (0x{m.offset:x}))",
        f"  expected: {m.expected}",
        f"  actual:   {m.actual}",
        f"  {_count(m.differing, m.unit)}; decoded row finite: expected "
        f"{_yes(m.expected_finite)}, actual {_yes(m.actual_finite)}"
        + (f"; max abs diff {m.max_abs_diff:g}" if m.max_abs_diff is not None else ""),
    ]
    if m.detail:
        lines.append(f"  {m.detail}")
    return lines


def render_short(s: ShortRead) -> str:
    return (f"short read: {s.path} ({s.stage}) file {escape_path(s.file)}, offset {s.offset} (0x{s.offset:x}), "
            f"asked {s.requested} bytes, got {s.returned}, not at end of file")


def render(report: RowsReport) -> list[str]:
    r = report
    lines = [f"file {escape_path(r.file)}",
             f"tensor {escape(r.tensor)}: {r.ggml_type}, {r.n_cols} columns, {r.row_bytes}-byte rows, "
             f"{r.n_rows} rows at offset {r.table_offset}",
             f"rows: {r.rows_checked} ({escape(r.selection)}); crossing: {_geometry(r.geometry)}"]
    for s in r.stats:
        cache = f", cache {s.cache_hits} hits / {s.cache_misses} misses / {s.cache_evictions} evictions" \
            if s.cache_hits or s.cache_misses else ""
        lines.append(f"{s.path} ({s.stage}): {s.rows} rows, {s.reads} reads, {s.bytes} bytes, "
                     f"alignment {s.alignment} ({s.alignment_source}), {s.buffers} buffers{cache}, "
                     f"{s.seconds:.3f} s")
    for w in r.warnings:
        lines.append(f"warning: {w}")
    if r.capture is not None:
        c = r.capture
        diff = f", max abs diff {c.max_abs_diff:g}" if c.max_abs_diff is not None else ""
        lines.append(f"capture {escape_path(c.file)}: {c.rows} {c.kind} rows ({c.dtype}), "
                     f"{c.mismatched_rows} differ{diff}")
    for m in r.mismatches:
        lines.extend(render_mismatch(m))
    lines.extend(render_short(s) for s in r.short_reads)
    if r.mismatch_count > len(r.mismatches):
        lines.append(f"... {r.mismatch_count - len(r.mismatches)} more mismatches not shown")
    if r.short_read_count > len(r.short_reads):
        lines.append(f"... {r.short_read_count - len(r.short_reads)} more short reads not shown")
    lines.append(_result(r))
    return lines


def _result(r: RowsReport) -> str:
    """The verdict: what delivered the file's bytes (or how many did not), then whether the rows
    themselves hold non-finite values."""
    if not r.compared:
        verdict = "nothing compared: every read path was skipped"
    elif r.delivered:
        verdict = _delivered(r)
    else:
        kinds = ", ".join(f"{k} {n}" for k, n in r.by_kind) or "none"
        verdict = (f"{r.mismatch_count} mismatches ({kinds}), {r.short_read_count} short reads; "
                   f"mismatched rows crossing: {_geometry(r.mismatch_geometry)}")
    if r.nonfinite_rows:
        verdict += f"; {_nonfinite(r)}"
    return f"result: {'clean: ' if r.clean and r.compared else ''}{verdict}"


def _delivered(r: RowsReport) -> str:
    if r.capture is None:
        return "every path delivered the file's bytes"
    if not r.stats:
        return f"the capture matched the file in all {r.capture.rows} rows (no read path run)"
    return "every path and the capture delivered the file's bytes"


def _nonfinite(r: RowsReport) -> str:
    f = r.first_nonfinite
    rows = f"{r.nonfinite_rows} selected row{'s hold' if r.nonfinite_rows != 1 else ' holds'} non-finite values"
    if f is None:
        return rows
    where = f"column {f.column}" if f.field == "value" else f"block {f.block}, field {escape(f.field)}"
    how = f"{f.bits} {f.kind}" + (", which overflows when decoded" if f.cause == CAUSE_OVERFLOW else "")
    return f"{rows} (first: row {f.row}, {where} = {how}, offset {f.offset})"
